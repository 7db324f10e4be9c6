// A fake anywidget model for the widgets' jsdom tests: get/set/on/off/trigger with
// Backbone-like change events (trigger passes its arguments on, as for "msg:custom"), save_changes/send that record what they were given, and
// a count of the listeners still attached (a widget's cleanup must remove them all).

/** `state` is the model's traitlets (the model changes it in place). */
export function fakeModel(state) {
  const listeners = new Map();
  const model = {
    sent: [],
    saves: 0,
    get: (k) => state[k],
    set(k, v) {
      const old = state[k];
      state[k] = v;
      if (old !== v) model.trigger(`change:${k}`);
    },
    on(name, fn) {
      if (!listeners.has(name)) listeners.set(name, []);
      listeners.get(name).push(fn);
    },
    off(name, fn) {
      const fns = listeners.get(name) || [];
      const i = fns.indexOf(fn);
      if (i >= 0) fns.splice(i, 1);
    },
    trigger(name, ...args) {
      for (const fn of [...(listeners.get(name) || [])]) fn(...args);
    },
    save_changes() {
      model.saves += 1;
    },
    send(content) {
      model.sent.push(content);
    },
    listenerCount: () => [...listeners.values()].reduce((n, fns) => n + fns.length, 0),
  };
  return model;
}
