// The labextension's plugin where there is no notebook tracker (Voilà, issue 24):
// the tracker is optional, so the plugin activates cleanly and does nothing.
import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const SOURCE = readFileSync(resolve(HERE, "../../widgets/labextension/ocw-labextension/static/remoteEntry.js"), "utf8");

async function plugins() {
  delete window._JUPYTERLAB;
  new Function(SOURCE)(); // the container registers itself as JupyterLab's bootstrap expects
  const container = window._JUPYTERLAB["ocw-labextension"];
  const token = { name: "@jupyterlab/notebook:INotebookTracker" };
  container.init({ "@jupyterlab/notebook": { "4.4.0": { get: () => () => ({ INotebookTracker: token }) } } });
  const factory = await container.get("./extension");
  return { list: factory().default, token };
}

describe("labextension", () => {
  it("takes the notebook tracker as optional, never required", async () => {
    const { list, token } = await plugins();
    expect(list).toHaveLength(1);
    expect(list[0].optional).toEqual([token]);
    expect(list[0].requires ?? []).toEqual([]);
  });

  it("activates without a tracker (Voilà) and with one (JupyterLab)", async () => {
    const { list } = await plugins();
    expect(() => list[0].activate({}, null)).not.toThrow();
    const seen = [];
    const tracker = {
      forEach: (fn) => seen.push("forEach"),
      widgetAdded: { connect: () => seen.push("widgetAdded") },
      activeCellChanged: { connect: () => seen.push("activeCellChanged") },
    };
    list[0].activate({}, tracker);
    expect(seen).toEqual(["forEach", "widgetAdded", "activeCellChanged"]);
  });
});
