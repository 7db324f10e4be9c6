// ocw-labextension: a %%chat cell is edited as Markdown, not as Python.
//
// JupyterLab 4 highlights every code cell in the kernel's language, cell magics
// included, so an apostrophe in a chat message opens a Python string that runs
// to the end of the line. JupyterLab has no setting that maps a cell magic to a
// language (jupyterlab#15324); an extension has to set the cell's mime type.
//
// This file is a prebuilt JupyterLab extension written by hand, so ocw needs no
// build step: it is the module-federation container JupyterLab's bootstrap
// loads (`window._JUPYTERLAB[name]` with `init(shareScope)` and `get(module)`),
// and it takes @jupyterlab/notebook from the share scope JupyterLab hands it,
// so the INotebookTracker token is the very one the app provides.
//
// Invariant: only a code cell whose source starts with `%%chat` gets the
// Markdown mime type, and it gets back the notebook's own mime type as soon as
// it no longer starts so; the notebook re-setting the type (a kernel change)
// is answered by setting it again.
(function () {
  "use strict";

  const NAME = "ocw-labextension";
  const CHAT = /^\s*%%chat\b/;
  const MARKDOWN = "text/x-ipythongfm"; // the mime type of JupyterLab's Markdown cells

  let shareScope = null;

  function newer(a, b) {
    const pa = a.split(/[.+-]/).map((x) => parseInt(x, 10) || 0);
    const pb = b.split(/[.+-]/).map((x) => parseInt(x, 10) || 0);
    for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
      if ((pa[i] || 0) !== (pb[i] || 0)) return (pa[i] || 0) > (pb[i] || 0);
    }
    return false;
  }

  async function shared(pkg) {
    const versions = shareScope && shareScope[pkg];
    if (!versions || !Object.keys(versions).length) {
      throw new Error(`${NAME}: JupyterLab shares no ${pkg}`);
    }
    const best = Object.keys(versions).reduce((a, b) => (newer(b, a) ? b : a));
    let factory = versions[best].get();
    if (factory && typeof factory.then === "function") factory = await factory;
    return factory();
  }

  function mimeTypeAccessor(model) {
    for (let o = Object.getPrototypeOf(model); o; o = Object.getPrototypeOf(o)) {
      const d = Object.getOwnPropertyDescriptor(o, "mimeType");
      if (d && d.get && d.set) return d;
    }
    return null;
  }

  /** Keep one code cell's mime type in step with whether it is a %%chat cell.
   *
   * The notebook sets every code cell's mime type to the kernel's language (on
   * opening, on a kernel change), and the editor loads that language
   * asynchronously, applying whichever load finishes last. Correcting the type
   * after the notebook set it would race that load; so this cell's `mimeType`
   * setter is wrapped instead: the notebook's value is kept as the cell's own
   * type, and a %%chat cell gets Markdown without Python ever being asked for. */
  function follow(model, followed) {
    if (!model || model.type !== "code" || followed.has(model)) return;
    const accessor = mimeTypeAccessor(model);
    if (!accessor) return;
    followed.add(model);
    let own = accessor.get.call(model); // the notebook's type for this cell
    const effective = () => (CHAT.test(model.sharedModel.getSource()) ? MARKDOWN : own);
    const apply = () => {
      if (!model.isDisposed) accessor.set.call(model, effective());
    };
    Object.defineProperty(model, "mimeType", {
      configurable: true,
      get: () => accessor.get.call(model),
      set: (value) => {
        own = value;
        apply();
      },
    });
    model.sharedModel.changed.connect(apply);
    apply();
  }

  function plugin(INotebookTracker) {
    return {
      id: `${NAME}:chat-cell-markdown`,
      description: "Edit %%chat cells as Markdown, not Python.",
      autoStart: true,
      // Optional: Voilà (and any app without notebooks) has no tracker; the plugin then
      // has nothing to do and activates cleanly instead of failing on every load.
      optional: [INotebookTracker],
      activate(app, tracker) {
        if (!tracker) return;
        const followed = new WeakSet();
        const scan = (notebook) => {
          for (const cell of notebook.widgets) follow(cell.model, followed);
        };
        const watch = (panel) => {
          const notebook = panel.content;
          const hook = () => {
            if (!notebook.model) return;
            // The notebook creates its cell widgets in its own handler of the same signal.
            notebook.model.cells.changed.connect(() => queueMicrotask(() => scan(notebook)));
            scan(notebook);
          };
          notebook.modelChanged.connect(hook);
          hook();
          panel.context.ready.then(() => scan(notebook));
        };
        tracker.forEach(watch);
        tracker.widgetAdded.connect((_, panel) => watch(panel));
        tracker.activeCellChanged.connect((_, cell) => cell && follow(cell.model, followed));
      },
    };
  }

  const container = {
    init(scope) {
      shareScope = scope;
    },
    async get(module) {
      if (module !== "./extension") throw new Error(`${NAME} has no module ${module}`);
      const { INotebookTracker } = await shared("@jupyterlab/notebook");
      const plugins = [plugin(INotebookTracker)];
      return () => ({ __esModule: true, default: plugins });
    },
  };

  const registry = (window._JUPYTERLAB = window._JUPYTERLAB || {});
  registry[NAME] = container;
})();
