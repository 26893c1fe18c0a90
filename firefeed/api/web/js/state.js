// What every view shares: the selected project and run, the view shown, and the refresh hook app.js sets.
export const state = {
  company: null,
  project: null,
  runId: null,
  view: "runs",
  timer: null,
  findings: null,
  refresh: async () => {},
};
