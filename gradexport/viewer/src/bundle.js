// The page of a flight-recorder bundle (gradexport view BUNDLE): a header saying why the step went bad, where
// the two steps first diverge and which forward line made that node, then the bad step and the last healthy step
// kept, side by side, each in a viewer of its own (an iframe whose page this script writes from its own text,
// bundle-text.js). Each viewer has the step bar of its step's backward and opens at the step that runs the
// divergent node (marked as the origin in the bad step), its inputs and outputs in the side panel.
// Writes: no viewer field.
// Changes: the children of the host, a style element in the head, window.gradexportBundle.
import { el } from "./dom.js";
import { headerLines, viewerPage } from "./bundle-text.js";

const STYLE = `
html, body, #gradexport-viewer { height: 100%; margin: 0; }
.gx-bundle { display: flex; flex-direction: column; height: 100%; font: 13px Helvetica, Arial, sans-serif; color: #1b1b1b; background: #fff; }
.gx-bundle-head { padding: 8px 12px; border-bottom: 1px solid #616161; }
.gx-bundle-head div { margin: 2px 0; }
.gx-bundle-title { font-weight: bold; font-size: 15px; }
.gx-bundle-divergence { color: #8e0e45; font-weight: bold; }
.gx-bundle-warning { color: #8a4b00; }
.gx-bundle-panes { display: flex; flex: 1; min-height: 0; }
.gx-bundle-pane { flex: 1; display: flex; flex-direction: column; min-width: 0; border-right: 1px solid #616161; }
.gx-bundle-pane h2 { font-size: 13px; margin: 0; padding: 4px 12px; background: #f5f5f5; }
.gx-bundle-pane iframe { flex: 1; border: 0; width: 100%; }
@media (max-width: 800px) { .gx-bundle-panes { flex-direction: column; } .gx-bundle-pane { min-height: 420px; } }
`;

/**
 * The script API of one pane's viewer, once it is up and its first drawing is done.
 * @param {HTMLIFrameElement} frame
 * @returns {Promise<any>}
 */
function paneApi(frame) {
  return new Promise((resolve) => {
    const poll = () => {
      const api = frame.contentWindow && /** @type {any} */ (frame.contentWindow).gradexportViewer;
      if (api) api.ready.then(() => resolve(api));
      else setTimeout(poll, 50);
    };
    poll();
  });
}

/**
 * Mount the bundle page in `host`.
 * @param {HTMLElement} host
 * @param {{title: string, summary: import("./bundle-text.js").BundleSummary, bad: any, healthy: any}} bundle
 * @param {string} script the viewer's own script, which each pane's page runs
 */
export function mountBundle(host, bundle, script) {
  const { summary } = bundle;
  document.head.appendChild(el("style", {}, STYLE));
  const page = el("div", { class: "gx-bundle" });
  const head = el("div", { class: "gx-bundle-head" });
  for (const [name, text] of headerLines(summary)) head.appendChild(el("div", { class: name }, text));
  const panes = el("div", { class: "gx-bundle-panes" });
  const frames = [];
  for (const [name, data] of [["bad", bundle.bad], ["healthy", bundle.healthy]]) {
    if (!data) continue;
    const step = summary[`${name}_step`];
    const pane = el("section", { class: `gx-bundle-pane gx-bundle-${name}` });
    const frame = el("iframe", { title: `${name} step ${step}`, "data-step": name });
    frame.srcdoc = viewerPage(`${name} step ${step}`, data, script);
    pane.append(el("h2", {}, `${name === "bad" ? "bad" : "healthy"} step ${step}`), frame);
    panes.appendChild(pane);
    frames.push([name, frame]);
  }
  page.append(head, panes);
  host.appendChild(page);
  const apis = Object.fromEntries(frames.map(([name, frame]) => [name, paneApi(frame)]));
  const divergence = summary.divergence;
  // Each pane steps its backward to the divergent node (the engine may run it at another position in each step).
  const at = { bad: summary.divergence_step, healthy: summary.healthy_divergence_step };
  const shown = Promise.all(
    Object.entries(apis).map(([name, ready]) =>
      ready.then((api) => {
        if (divergence === null) return api;
        if (at[name] !== null && api.steps() > at[name]) api.step(at[name]);
        else if (name === "healthy") {
          try {
            api.select(divergence);
          } catch {
            // The healthy step's graph has no such node (its structure differs): nothing to select.
          }
        }
        return api;
      }),
    ),
  );
  /** @type {any} */ (window).gradexportBundle = {
    ready: shown.then(() => true),
    summary,
    bad: () => apis.bad,
    healthy: () => apis.healthy || Promise.resolve(null),
  };
}
