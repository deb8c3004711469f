// Runs: history per job and across jobs, and one run's status trail, reason and output.

import { segment } from "../api.js";
import {
  LOG_PATH,
  fetchRuns,
  fireCell,
  parseTaskId,
  resultBadge,
  resultCell,
  resultOf,
  stateBadge,
  traceOrder,
  traceRows,
} from "../data.js";
import { duration, fieldList, fill, fireTimeEl, h, link, note, section, table, timeEl, toDate } from "../dom.js";

const SINCE = [
  ["", "any time"],
  ["1h", "last hour"],
  ["24h", "last 24 hours"],
  ["7d", "last 7 days"],
];
const SINCE_MS = { "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };
const RESULTS = [
  ["", "any result"],
  ["success", "success"],
  ["failure", "failure"],
  ["killed", "killed"],
  ["running", "running"],
  ["fire_excluded", "fire excluded by a calendar"],
];
const RUNS_SHOWN = 200;
// Rows a page of the runs view shows (issue 30: 200 rows made one 10,000-pixel page).
const PAGE_SIZE = 50;
// The job filter offers the first this many jobs (and the one the link names).
const JOB_CHOICES = 1000;
const LOG_CHUNK = 64 * 1024;
const LOG_KEEP = 512 * 1024;

function select(name, label, options, value) {
  return h(
    "label",
    { class: "filter" },
    h("span", {}, label),
    h("select", { name }, options.map(([v, text]) => h("option", { value: v, selected: v === value }, text))),
  );
}

export function list(ctx) {
  const { api, query } = ctx;
  const jobFilter = select("job", "Job", [["", "all jobs"]], query.get("job") || "");
  const resultFilter = select("result", "Result", RESULTS, query.get("result") || "");
  const sinceFilter = select("since", "Started", SINCE, query.get("since") || "");
  const sourceNote = h("p", { class: "muted small" });
  const body = h("div");
  const pager = h("div", { class: "pager", "data-pager": "runs" });
  let pageIndex = Math.max(0, Number.parseInt(query.get("page") || "0", 10) || 0);
  const el = h(
    "div",
    { class: "view" },
    h("h1", {}, "Runs"),
    h("div", { class: "filters" }, jobFilter, resultFilter, sinceFilter),
    body,
    pager,
    sourceNote,
  );
  const value = (label) => label.querySelector("select").value;
  // The job filter's names: the first page of the job list, read once per visit (every poll
  // read the whole list: megabytes a poll with 100,000 jobs; issue 29).
  let jobNames = null;
  const poll = ctx.every(5000, async () => {
    // From the link: the job list is filled in by the first answer.
    const job = ctx.query.get("job") || "";
    const since = SINCE_MS[value(sinceFilter)] ? new Date(Date.now() - SINCE_MS[value(sinceFilter)]) : null;
    const namesWanted = jobNames === null ? api.get(`/api/job/jobs?limit=${JOB_CHOICES}`) : Promise.resolve(null);
    const [jobsPage, found] = await Promise.all([namesWanted, fetchRuns(api, { job, since, limit: RUNS_SHOWN })]);
    if (!ctx.alive) return;
    if (jobsPage !== null) jobNames = (jobsPage.items || []).map((j) => j.jobName);
    const jobSelect = jobFilter.querySelector("select");
    const names = [...jobNames];
    if (job && !names.includes(job)) names.push(job);
    fill(
      jobSelect,
      h("option", { value: "" }, "all jobs"),
      names.sort().map((n) => h("option", { value: n, selected: n === job }, n)),
    );
    const wanted = value(resultFilter);
    const matching = wanted ? found.runs.filter((r) => r.result === wanted) : found.runs;
    const pages = Math.max(1, Math.ceil(matching.length / PAGE_SIZE));
    pageIndex = Math.min(pageIndex, pages - 1);
    const first = pageIndex * PAGE_SIZE;
    const runs = matching.slice(first, first + PAGE_SIZE);
    const turn = (to) => {
      pageIndex = to;
      ctx.setQuery({ job: value(jobFilter), result: value(resultFilter), since: value(sinceFilter), page: to ? String(to) : "" });
      poll.now();
    };
    fill(
      pager,
      matching.length > PAGE_SIZE
        ? [
            h("button", { type: "button", class: "button secondary", "data-page": "newer", disabled: pageIndex === 0, onclick: () => turn(pageIndex - 1) }, "Newer"),
            h("span", { class: "muted", "data-page-of": String(pageIndex + 1) }, ` Runs ${first + 1}-${first + runs.length} of the latest ${matching.length} (page ${pageIndex + 1} of ${pages}) `),
            h("button", { type: "button", class: "button secondary", "data-page": "older", disabled: pageIndex >= pages - 1, onclick: () => turn(pageIndex + 1) }, "Older"),
          ]
        : [],
    );
    fill(
      body,
      table(
        [
          { label: "Started", cell: (r) => timeEl(r.start) },
          { label: "Job", cell: (r) => link(["jobs", r.jobName], r.jobName) },
          { label: "Fire", cell: (r) => fireCell(r) },
          { label: "Shard", cell: (r) => String(r.shard) },
          { label: "Result", cell: (r) => resultCell(r) },
          { label: "Duration", cell: (r) => (r.start && r.end ? duration(r.end - r.start) : r.result === "running" ? "running" : "—") },
          { label: "Reason", cell: (r) => h("span", { class: "reason" }, r.reason || "") },
          { label: "", cell: (r) => (r.taskId ? link(["runs", r.jobName, r.taskId], "details", null, { "data-task": r.taskId }) : "") },
        ],
        runs,
        "No run matches.",
        { "data-table": "runs" },
      ),
    );
    sourceNote.textContent =
      found.source === "runs"
        ? "From the job's runs endpoint."
        : `From the event trace: the latest ${traceRows(RUNS_SHOWN)} status changes that match the job and time, by task.`;
  });
  const onFilter = () => {
    pageIndex = 0;
    ctx.setQuery({ job: value(jobFilter), result: value(resultFilter), since: value(sinceFilter), page: "" });
    poll.now();
  };
  for (const label of [jobFilter, resultFilter, sinceFilter]) {
    label.querySelector("select").addEventListener("change", onFilter);
  }
  return el;
}

export function detail(ctx) {
  const { api } = ctx;
  const job = ctx.params.job;
  const taskId = ctx.params.task;
  const summary = h("div");
  const trail = h("div");
  const executions = h("div");
  const logs = h("div");
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["runs"], "Runs"), " / ", link(["runs"], job, { job }), " / "),
    h("h1", { class: "task-title" }, "Run ", h("code", { class: "wrap" }, taskId)),
    section("Summary", summary),
    section("Status trail", trail),
    section("Output", logs),
    section("Execution records", executions),
  );
  let finished = false;

  ctx.every(3000, async () => {
    const [traces, records] = await Promise.all([
      api.get("/api/job/events/statusTraces", { taskId, sort: "creationTime", order: "asc", per_page: 1000 }),
      api.get("/api/job/events/executions", { taskId, sort: "startTime", order: "asc", per_page: 100 }),
    ]);
    if (!ctx.alive) return;
    const rows = ((traces && traces.rows) || []).slice().sort(traceOrder);
    const execs = (records && records.rows) || [];
    const last = rows[rows.length - 1];
    const result = last ? resultOf(last.state) : "unknown";
    finished = Boolean(last) && result !== "running";
    const start = rows.length ? toDate(rows[0].creationTime) : null;
    const end = finished ? toDate(last.creationTime) : null;
    const failure = execs.map((e) => e.failureCause && e.failureCause.plainText).filter(Boolean);
    const reason = result === "success" || result === "running" ? "" : (last && last.message) || "";
    // The launch row names the fire it runs for and, for a backfill's run, the backfill (issue 28):
    // "launched; backfill <id>; fired at <time>".
    const launch = rows.find((r) => r.state === "TASK_STAGING");
    const launchText = String((launch && launch.message) || "");
    const fired = /fired at (\S+)/.exec(launchText);
    const backfill = /backfill ([A-Za-z0-9_.:-]+)/.exec(launchText);
    fill(
      summary,
      fieldList([
        ["Job", link(["jobs", job], job)],
        ["Shard", String(parseTaskId(taskId).shard)],
        ["Result", last ? [resultBadge(result), " ", stateBadge(last.state)] : h("span", { class: "muted" }, "no status recorded (yet)")],
        ["Fire", fired ? fireTimeEl(fired[1]) : h("span", { class: "muted" }, "—")],
        ["Backfill", backfill ? h("code", { "data-backfill-run": backfill[1] }, backfill[1]) : h("span", { class: "muted" }, "no")],
        ["Started", timeEl(start)],
        ["Ended", finished ? timeEl(end) : h("span", { class: "muted" }, last ? "still running" : "—")],
        ["Duration", start && end ? duration(end - start) : "—"],
        ["Agent", (last && last.slaveId) || "—"],
        ["Failure reason", reason || failure.length ? h("pre", { class: "reason-text" }, [reason, ...failure].filter(Boolean).join("\n\n")) : "—"],
      ]),
    );
    fill(
      trail,
      table(
        [
          { label: "Time", cell: (r) => timeEl(r.creationTime, { withRelative: false, ms: true }) },
          { label: "State", cell: (r) => stateBadge(r.state) },
          { label: "Message", cell: (r) => h("span", { class: "reason" }, r.message || "") },
          { label: "Agent", cell: (r) => r.slaveId || "—" },
        ],
        rows,
        "The event trace has no status of this task (the trace may be off, or the task older than its history).",
        { "data-table": "trail" },
      ),
    );
    fill(
      executions,
      table(
        [
          { label: "Started", cell: (r) => timeEl(r.startTime, { withRelative: false }) },
          { label: "Completed", cell: (r) => timeEl(r.completeTime || null, { withRelative: false }) },
          { label: "Host", cell: (r) => r.hostname || r.ip || "—" },
          { label: "Success", cell: (r) => (r.success === undefined ? "—" : r.success ? "yes" : "no") },
          { label: "Failure cause", cell: (r) => (r.failureCause && r.failureCause.plainText ? h("pre", { class: "reason-text" }, r.failureCause.plainText) : "—") },
        ],
        execs,
        "No execution record (SCRIPT command tasks may write none).",
      ),
    );
  });

  // stdout / stderr, read from where the last read ended, while the run goes on.
  const streams = {
    stdout: { offset: null, text: "", final: false },
    stderr: { offset: null, text: "", final: false },
  };
  let stream = "stdout";
  const pre = h("pre", { class: "log", "data-log": "stdout", tabindex: "0" });
  const status = h("p", { class: "muted small" });
  const tabs = ["stdout", "stderr"].map((name) =>
    h("button", { type: "button", class: "tab", "aria-pressed": String(name === stream), "data-stream": name }, name),
  );
  for (const tab of tabs) {
    tab.addEventListener("click", () => {
      stream = tab.dataset.stream;
      for (const t of tabs) t.setAttribute("aria-pressed", String(t === tab));
      pre.dataset.log = stream;
      pre.textContent = streams[stream].text;
      logPoll.now();
    });
  }
  const path = `/api/job/${segment(job)}/runs/${segment(taskId)}/log`;
  let available = null;
  const logPoll = ctx.every(2000, async () => {
    if (available === null) {
      available = await api.has("GET", LOG_PATH);
      fill(logs, available ? [h("div", { class: "tabs" }, tabs), pre, status] : note("Logs are not available on this server (its API has no run-log endpoint yet)."));
    }
    if (!available) return;
    const state = streams[stream];
    const reading = stream;
    if (state.final) return; // read once more after the run ended: nothing more will come
    const ended = finished;
    try {
      if (state.offset === null) {
        // Start near the end of a long log: its size first (offset -1), as a Mesos agent answers.
        const size = await api.get(path, { stream: reading, offset: -1 });
        state.offset = Math.max(0, Number((size && size.offset) || 0) - LOG_CHUNK);
      }
      for (let i = 0; i < 16; i++) {
        const chunk = await api.get(path, { stream: reading, offset: state.offset, length: LOG_CHUNK });
        const data = (chunk && typeof chunk.data === "string" && chunk.data) || "";
        if (!data) break;
        // The API's nextOffset counts the bytes read: a byte that is not UTF-8 arrives as one
        // U+FFFD (3 bytes in UTF-8), so the length of the decoded text would skip what follows.
        const next = Number(chunk.nextOffset);
        const start = Number(chunk.offset);
        state.offset =
          Number.isSafeInteger(next) && next > start ? next : start + new TextEncoder().encode(data).length;
        state.text = (state.text + data).slice(-LOG_KEEP);
        if (data.length < LOG_CHUNK / 4) break;
      }
    } catch (error) {
      if (!ctx.alive) return;
      status.textContent = `Could not read ${reading}: ${error.message}`;
      return;
    }
    if (ended) state.final = true;
    if (!ctx.alive || reading !== stream) return;
    if (pre.textContent !== state.text) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = state.text;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    status.textContent = finished
      ? `${state.text ? "" : "Empty. "}The run has ended.`
      : `${state.text ? "" : "Nothing yet. "}Refreshing every 2 s while the run goes on.`;
  });
  return el;
}
