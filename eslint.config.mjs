// ESLint's rules for the project's JavaScript: the viewer's sources (browser modules, one of them the layout
// worker), its unit tests and the build scripts (node). `npm run lint:js` runs it; `make lint` runs that.
import js from "@eslint/js";
import globals from "globals";

export default [
  // Built or vendored files: the bundle is esbuild's output of gradexport/viewer/src.
  { ignores: ["gradexport/viewer/viewer.bundle.js", "build/", "dist/", "site/", "out/", ".lowest/", ".venv*/", "tests/artifacts/"] },
  js.configs.recommended,
  {
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      eqeqeq: "error",
      "no-var": "error",
      "prefer-const": "error",
      "no-shadow": "error",
      "no-implicit-coercion": "error",
      "object-shorthand": "error",
      "no-unused-vars": ["error", { args: "after-used", ignoreRestSiblings: true }],
    },
  },
  {
    files: ["gradexport/viewer/src/**/*.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.browser },
  },
  {
    files: ["gradexport/viewer/src/worker.js"],
    languageOptions: { globals: globals.worker },
  },
  {
    files: ["tests/**/*.mjs", "scripts/**/*.mjs", "benchmarks/**/*.mjs", "eslint.config.mjs"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.node },
  },
];
