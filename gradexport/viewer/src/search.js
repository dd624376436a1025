// Search: the matches of a text (model.js's search) marked on the drawing and listed in the panel;
// a listed match, or with `reveal` the first, is revealed (its groups opened), selected and centred.
// Writes: viewer.matches.
// Changes: the children of viewer.panel, and the folds (it opens the groups around a match).
import { el } from "./dom.js";
import { refresh } from "./draw.js";
import { search } from "./model.js";
import { centerOn, paintMarks } from "./selection.js";
import { printable } from "./text.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

/**
 * The ids that match `text`, marked and listed; `reveal` also shows the first.
 * @param {Viewer} viewer
 */
export function runSearch(viewer, text, reveal) {
  const { folds, graph, panel } = viewer;
  const ids = search(graph, folds, text);
  const rep = viewer.current.rep;
  // search() gives the ids of nodes and groups of these folds.
  const items = ids.map((id) => /** @type {number} */ (folds.item(id)));
  viewer.matches = new Set(items.map((item) => (folds.isGroup(item) ? item : rep[item])));
  paintMarks(viewer);
  panel.replaceChildren(el("h2", {}, `${ids.length} match${ids.length === 1 ? "" : "es"}`));
  const list = el("ul", { class: "gx-results" });
  for (const [j, id] of ids.slice(0, 200).entries()) {
    const item = items[j];
    const b = el("button", { type: "button" }, printable(`${id}: ${folds.title(item)}`));
    b.addEventListener("click", () => revealAndSelect(viewer, item));
    const li = el("li");
    li.appendChild(b);
    list.appendChild(li);
  }
  panel.appendChild(list);
  if (reveal && ids.length) revealAndSelect(viewer, items[0], true);
  return ids;
}

/**
 * Open the groups around `item`, then select it, centre on it and zoom in to read it; `keepPanel` leaves the list of matches shown.
 * @param {Viewer} viewer
 * @param {number} item
 * @param {boolean} [keepPanel]
 */
export function revealAndSelect(viewer, item, keepPanel) {
  viewer.folds.reveal(item);
  return refresh(viewer).then(() => {
    viewer.selectItem(item, keepPanel);
    centerOn(viewer, item, true);
  });
}
