// A job's backfills (issue 28) and its fires that ran nothing, for the job's page.
//
// A backfill runs the job's cron fires of a past range (`POST /api/job/{job}/backfill`), in order,
// paced by an optional rate. The form asks for a dry run first: the fires it would run are shown,
// and only then can it be started (changing the range asks again). The job's backfills are listed
// with their status and progress, with pause/resume/cancel for an operator of the job's app.
//
// Skipped fires: the event trace's FIRE_EXCLUDED (a calendar excludes it), FIRE_SKIPPED, FIRE_CAPPED
// and FIRE_DELAYED rows of the job, newest first.

import { segment } from "../api.js";
import { BACKFILLS_PATH, FIRE_EVENT_STATES, resultBadge, serves } from "../data.js";
import {
  actionButton,
  badge,
  confirmDialog,
  field,
  fill,
  fireTimeEl,
  h,
  note,
  numberOrText,
  section,
  showFieldErrors,
  table,
  timeEl,
  toast,
} from "../dom.js";
import { OPERATOR } from "../rights.js";

const PREVIEW_SHOWN = 20;
const SKIPPED_SHOWN = 20;
const STATUS_KIND = { RUNNING: "info", PAUSED: "warn", CANCELLED: "muted", DONE: "ok" };
const NOT_AVAILABLE = "Backfills are not available on this server (its API has no backfill endpoint yet).";

const pathOf = (job) => `/api/job/${segment(job)}`;

// A `datetime-local` value (the browser's zone) as ISO 8601 with its offset, or "" when empty
// or not a time (the API names the problem then: the text is sent as typed).
export function localToIso(value) {
  const text = String(value || "").trim();
  if (!text) return "";
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? text : date.toISOString();
}

function backfillList(answer) {
  if (Array.isArray(answer)) return answer;
  const items = answer && (answer.items || answer.backfills);
  return Array.isArray(items) ? items : [];
}

function statusBadge(status) {
  const text = String(status || "?");
  return badge(text.toLowerCase(), STATUS_KIND[text] || "muted");
}

function progressCell(b) {
  const fires = Number(b.fires) || 0;
  const launched = Number(b.launched ?? b.nextIndex) || 0;
  return h(
    "span",
    { class: "progress-cell", "data-launched": String(launched), "data-fires": String(fires) },
    h("progress", { max: String(Math.max(fires, 1)), value: String(launched) }),
    ` ${launched} / ${fires} launched`,
  );
}

function fireList(times, total) {
  const shown = times.slice(0, PREVIEW_SHOWN);
  return [
    h("ol", { class: "fire-times", "data-list": "backfill-fires" }, shown.map((t) => h("li", {}, fireTimeEl(t)))),
    total > shown.length ? h("p", { class: "muted small" }, `and ${total - shown.length} more`) : null,
  ];
}

// The Backfills section of job `name`'s page. `update(job)` is called with the job's definition
// at each refresh of the page (it draws the controls for the caller's role on the job's app).
export function backfillSection(ctx, name) {
  const { api } = ctx;
  const listBox = h("div");
  const formBox = h("div");
  const el = section("Backfills", formBox, listBox);
  el.dataset.section = "backfills";
  let available = null;
  let drawnFor = null; // the app the form was drawn for

  // Polled once the job is known (a job the caller may not see is never asked about).
  const poll = async () => {
    if (available === null) available = await serves(api, BACKFILLS_PATH, `${pathOf(name)}/backfills`);
    if (!available) {
      fill(listBox, note(NOT_AVAILABLE));
      fill(formBox);
      return;
    }
    const answer = await api.get(`${pathOf(name)}/backfills`);
    if (!ctx.alive) return;
    const rows = backfillList(answer).filter((b) => b && typeof b === "object" && typeof b.backfillId === "string");
    const operate = drawnFor !== null && ctx.may(OPERATOR, drawnFor);
    fill(
      listBox,
      table(
        [
          { label: "Backfill", cell: (b) => h("code", { "data-backfill": b.backfillId }, b.backfillId) },
          { label: "Range", cell: (b) => [fireTimeEl(b.from), " – ", fireTimeEl(b.to)] },
          { label: "Status", cell: (b) => statusBadge(b.status) },
          { label: "Progress", cell: progressCell },
          { label: "Rate", cell: (b) => (b.firesPerMinute ? `${b.firesPerMinute}/min` : "as fast as it runs") },
          { label: "Next fire", cell: (b) => (b.nextFireTime ? fireTimeEl(b.nextFireTime) : h("span", { class: "muted" }, "—")) },
          { label: "Created", cell: (b) => timeEl(b.createdAt || null) },
          operate ? { label: "", cell: (b) => controls(b) } : null,
        ].filter(Boolean),
        rows,
        "No backfill of this job.",
        { "data-table": "backfills" },
      ),
    );
  };
  let refresh = null;

  const act = (b, verb, text) =>
    actionButton(
      text,
      async () => {
        if (verb === "cancel") {
          const ok = await confirmDialog({
            title: `Cancel backfill ${b.backfillId}?`,
            lines: ["Its fires not launched yet are dropped; runs already going keep running."],
            confirmText: "Cancel backfill",
            danger: true,
          });
          if (!ok) return;
        }
        await api.post(`${pathOf(name)}/backfills/${segment(b.backfillId)}/${verb}`);
        toast(`Backfill ${b.backfillId}: ${verb} sent`);
        await refresh.now();
      },
      { class: `small${verb === "cancel" ? " danger" : ""}`, "data-action": `backfill-${verb}` },
    );

  const controls = (b) => {
    const status = String(b.status || "");
    if (status === "RUNNING") return [act(b, "pause", "Pause"), " ", act(b, "cancel", "Cancel")];
    if (status === "PAUSED") return [act(b, "resume", "Resume"), " ", act(b, "cancel", "Cancel")];
    return null;
  };

  const startForm = () => {
    const from = h("input", { name: "from", type: "datetime-local", step: "1" });
    const to = h("input", { name: "to", type: "datetime-local", step: "1" });
    const rate = h("input", { name: "firesPerMinute", inputmode: "decimal", placeholder: "as fast as it runs" });
    const policy = h(
      "select",
      { name: "overlapPolicy" },
      [["", "the job's own"], ["FORBID", "FORBID (one after the other)"], ["ALLOW", "ALLOW (beside each other)"]].map(([v, t]) => h("option", { value: v }, t)),
    );
    const general = h("p", { class: "error", role: "alert", hidden: true });
    const preview = h("div", { class: "preview", "data-preview": "backfill", "aria-live": "polite" });
    const previewButton = h("button", { type: "submit", class: "secondary", "data-action": "backfill-preview" }, "Preview fires (dry run)");
    const startButton = h("button", { type: "button", class: "primary", "data-action": "backfill-start", disabled: true }, "Start backfill");
    const formEl = h(
      "form",
      { class: "inline-form", novalidate: true, "data-form": "backfill" },
      h("h3", {}, "Start a backfill"),
      note("Runs the job's fires of a past range, in order, as its cron would have (its calendars' exclusions apply). Times are in this browser's zone."),
      general,
      h(
        "div",
        { class: "grid four" },
        field("From (inclusive)", from),
        field("To (inclusive)", to),
        field("Fires per minute", rate, "Empty: one after the other, as fast as they run."),
        field("Overlap policy", policy),
      ),
      preview,
      h("div", { class: "actions" }, previewButton, startButton),
    );
    let previewed = null; // the body the shown preview is of
    const body = (dryRun) => {
      const out = { from: localToIso(from.value), to: localToIso(to.value), dryRun };
      const perMinute = numberOrText(rate.value);
      if (perMinute !== undefined) out.firesPerMinute = perMinute;
      if (policy.value) out.overlapPolicy = policy.value;
      return out;
    };
    const same = (a, b) => JSON.stringify({ ...a, dryRun: false }) === JSON.stringify({ ...b, dryRun: false });
    const forget = () => {
      previewed = null;
      startButton.disabled = true;
      fill(preview);
    };
    for (const control of [from, to, rate, policy]) {
      control.addEventListener("input", forget);
      control.addEventListener("change", forget);
    }
    formEl.addEventListener("submit", async (event) => {
      event.preventDefault();
      const asked = body(true);
      previewButton.disabled = true;
      try {
        const answer = await api.post(`${pathOf(name)}/backfill`, asked);
        general.hidden = true;
        const times = Array.isArray(answer && answer.fireTimes) ? answer.fireTimes : [];
        const total = Number(answer && answer.fires) || times.length;
        const excluded = Number(answer && answer.excludedFires) || 0;
        fill(
          preview,
          h(
            "p",
            { "data-preview-count": String(total) },
            h("strong", {}, `${total} fire${total === 1 ? "" : "s"}`),
            excluded ? ` (${excluded} more excluded by the job's calendars)` : "",
            total ? " would run:" : ": nothing to run in this range.",
          ),
          total ? fireList(times, total) : null,
        );
        previewed = total ? asked : null;
        startButton.disabled = !total;
      } catch (error) {
        forget();
        showFieldErrors(formEl, error.fields, general, error.message);
      } finally {
        previewButton.disabled = false;
      }
    });
    startButton.addEventListener("click", async () => {
      const asked = body(false);
      if (!previewed || !same(previewed, asked)) {
        forget();
        return;
      }
      startButton.disabled = true;
      try {
        const answer = await api.post(`${pathOf(name)}/backfill`, asked);
        toast(`Backfill ${(answer && answer.backfillId) || ""} started: ${(answer && answer.fires) ?? "?"} fires`);
        forget();
        general.hidden = true;
        await refresh.now();
      } catch (error) {
        startButton.disabled = false;
        showFieldErrors(formEl, error.fields, general, error.message);
      }
    });
    return formEl;
  };

  const update = (job) => {
    if (!job || drawnFor === job.appName) return;
    drawnFor = job.appName;
    const can = available !== false && ctx.may(OPERATOR, job.appName) && Boolean(job.cron) && job.jobExecutionType !== "DAEMON";
    fill(formBox, can ? startForm() : null);
    if (refresh) refresh.now();
    else refresh = ctx.every(5000, poll);
  };
  return { el, update };
}

// The Skipped fires section of job `name`'s page: the trace's fire events of the job.
export function skippedFiresSection(ctx, name) {
  const { api } = ctx;
  const box = h("div");
  ctx.every(10000, async () => {
    const pages = await Promise.all(
      FIRE_EVENT_STATES.map((state) =>
        api.get("/api/job/events/statusTraces", {
          jobName: name,
          state,
          sort: "creationTime",
          order: "desc",
          per_page: SKIPPED_SHOWN,
        }),
      ),
    );
    if (!ctx.alive) return;
    const rows = pages
      .flatMap((page) => (page && Array.isArray(page.rows) ? page.rows : []))
      .sort((a, b) => (Date.parse(b.creationTime) || 0) - (Date.parse(a.creationTime) || 0))
      .slice(0, SKIPPED_SHOWN);
    fill(
      box,
      table(
        [
          { label: "When", cell: (r) => timeEl(r.creationTime) },
          { label: "What", cell: (r) => h("span", { "data-state": String(r.state || "") }, resultBadge(String(r.state || "").toLowerCase())) },
          { label: "Reason", cell: (r) => h("span", { class: "reason" }, r.message || "") },
        ],
        rows,
        "No fire of this job was skipped, excluded, capped or delayed (in the event trace).",
        { "data-table": "skipped-fires" },
      ),
    );
  });
  const el = section("Skipped fires", box);
  el.dataset.section = "skipped-fires";
  return el;
}
