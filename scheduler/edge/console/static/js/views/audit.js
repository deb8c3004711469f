// Audit: who changed what, and what was refused, newest first, from GET /api/audit (cluster-admins
// see every record, an app's admins its app's). Filters by actor, app, job, action, outcome and
// time are in the URL; "Older records" follows the answer's cursor.

import { badge, fill, h, note, table, timeEl } from "../dom.js";
import { APP_ADMIN } from "../rights.js";

const PAGE = 50;
const OUTCOMES = [
  ["", "any outcome"],
  ["ok", "ok"],
  ["denied", "denied"],
  ["error", "error"],
];
const TEXT_FILTERS = [
  ["actor", "Actor", "user:alice or token:0123456789ab"],
  ["app", "App", "an app name"],
  ["job", "Job", "a job name"],
  ["action", "Action", "job.update, token.create, ..."],
];
const OUTCOME_KINDS = { ok: "ok", denied: "warn", error: "bad" };

// A time the API gives as epoch milliseconds or ISO 8601.
function when(value) {
  if (typeof value === "number" && value > 1e11) return timeEl(new Date(value).toISOString(), { ms: true });
  return timeEl(value === undefined ? null : value, { ms: true });
}

// A datetime-local input's value (local time) as ISO 8601 in UTC; "" for none.
function isoOf(local) {
  if (!local) return "";
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? "" : date.toISOString();
}

// An ISO 8601 time as a datetime-local input's value.
function localOf(iso) {
  const date = iso ? new Date(iso) : null;
  if (!date || Number.isNaN(date.getTime())) return "";
  const shifted = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return shifted.toISOString().slice(0, 19);
}

function text(value) {
  if (value === undefined || value === null || value === "") return h("span", { class: "muted" }, "—");
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

// A configuration change's fields before and after (secrets already masked by the server).
function changesCell(changes) {
  if (changes === undefined || changes === null) return h("span", { class: "muted" }, "—");
  return h(
    "details",
    { class: "changes" },
    h("summary", {}, "changes"),
    h("pre", { class: "reason-text" }, JSON.stringify(changes, null, 2)),
  );
}

export function view(ctx) {
  const { api, query, rights } = ctx;
  if (!rights.mayAny(APP_ADMIN)) {
    return h("div", { class: "view" }, h("h1", {}, "Audit"), note("The audit log is for cluster-admins and the admins of an app."));
  }
  const inputs = {};
  for (const [name, label, placeholder] of TEXT_FILTERS) {
    inputs[name] = h("input", { name, placeholder, value: query.get(name) || "", autocomplete: "off", spellcheck: "false", "aria-label": label });
  }
  inputs.outcome = h(
    "select",
    { name: "outcome", "aria-label": "Outcome" },
    OUTCOMES.map(([v, label]) => h("option", { value: v, selected: v === (query.get("outcome") || "") }, label)),
  );
  inputs.since = h("input", { name: "since", type: "datetime-local", step: "1", value: localOf(query.get("since")), "aria-label": "Since" });
  inputs.until = h("input", { name: "until", type: "datetime-local", step: "1", value: localOf(query.get("until")), "aria-label": "Until" });
  const labelled = (label, control) => h("label", { class: "filter" }, h("span", {}, label), control);
  const form = h(
    "form",
    { class: "filters", "data-form": "audit-filters" },
    TEXT_FILTERS.map(([name, label]) => labelled(label, inputs[name])),
    labelled("Outcome", inputs.outcome),
    labelled("Since", inputs.since),
    labelled("Until", inputs.until),
    h("button", { type: "submit", class: "primary" }, "Filter"),
  );
  const body = h("div");
  const more = h("button", { type: "button", class: "button", "data-more": "audit" }, "Older records");
  const moreBox = h("p");
  const count = h("span", { class: "muted" });
  const el = h(
    "div",
    { class: "view" },
    h("h1", {}, "Audit ", count),
    h(
      "p",
      { class: "muted" },
      rights.isClusterAdmin
        ? "Every change and every refused request, newest first."
        : "The changes and refused requests of the apps you administer, newest first.",
    ),
    form,
    body,
    moreBox,
  );

  const filters = () => {
    const values = {};
    for (const [name] of TEXT_FILTERS) values[name] = inputs[name].value.trim();
    values.outcome = inputs.outcome.value;
    values.since = isoOf(inputs.since.value);
    values.until = isoOf(inputs.until.value);
    return values;
  };

  // Pages shown so far are read again on each refresh, from the newest.
  let pages = 1;
  const refresh = ctx.every(10000, async () => {
    const wanted = filters();
    const records = [];
    let cursor = null;
    for (let n = 0; n < pages; n += 1) {
      const answer = await api.get("/api/audit", { ...wanted, limit: PAGE, cursor });
      records.push(...((answer && Array.isArray(answer.items) && answer.items) || []));
      cursor = (answer && answer.nextCursor) || null;
      if (!cursor) break;
    }
    if (!ctx.alive) return;
    count.textContent = `(${records.length}${cursor ? ", older ones on the server" : ""})`;
    fill(moreBox, cursor ? more : null);
    fill(
      body,
      table(
        [
          { label: "Time", cell: (r) => when(r.time) },
          { label: "Actor", cell: (r) => h("code", {}, text(r.actor)) },
          { label: "Source", cell: (r) => text(r.source) },
          { label: "Action", cell: (r) => h("code", {}, text(r.action)) },
          { label: "Resource", cell: (r) => h("code", { class: "wrap" }, text(r.resource)) },
          { label: "Outcome", cell: (r) => badge(String(r.outcome || "?"), OUTCOME_KINDS[r.outcome] || "muted") },
          { label: "Status", cell: (r) => text(r.status) },
          { label: "Request", cell: (r) => h("code", { class: "task-id" }, text(r.requestId)) },
          { label: "Term", cell: (r) => text(r.term) },
          { label: "Changes", cell: (r) => changesCell(r.changes) },
        ],
        records,
        "No audit record matches.",
        { "data-table": "audit" },
      ),
    );
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    pages = 1;
    ctx.setQuery(filters());
    refresh.now();
  });
  more.addEventListener("click", () => {
    pages += 1;
    refresh.now();
  });
  return el;
}
