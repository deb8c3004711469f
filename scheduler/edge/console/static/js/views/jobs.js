// Jobs: the list with filters and search, and one job's detail with its actions. The list is the
// jobs the caller may see (the API filters it); a job's controls follow the caller's role on its
// app: trigger, enable/disable and kill from operator, edit and delete from editor.

import { segment } from "../api.js";
import {
  KILL_PATH,
  NEXT_PATH,
  TASK_KILL_PATH,
  fetchRuns,
  fireCell,
  jobOfTask,
  lastRun,
  mapLimit,
  readyCounts,
  resultBadge,
  resultCell,
  shardsOfTask,
  stateBadge,
} from "../data.js";
import {
  actionButton,
  badge,
  confirmDialog,
  duration,
  fieldList,
  fill,
  fireTimeEl,
  h,
  href,
  link,
  note,
  section,
  table,
  timeEl,
  toast,
} from "../dom.js";
import { EDITOR, OPERATOR } from "../rights.js";
import { backfillSection, skippedFiresSection } from "./backfills.js";
import { calendarLinks } from "./calendars.js";
import { jobWorkflowsSection } from "./workflows.js";

const NOT_AVAILABLE = "Not available on this server (its API has no such endpoint yet).";
// Jobs are listed a page at a time (GET /api/job/jobs?limit=&cursor=); "More jobs" loads one
// more page, and each refresh reloads as many pages as are shown.
const JOBS_PAGE = 100;
const APPS_LISTED = 1000;

// The items of a paged answer ({items, nextCursor}) or of an older server's plain array.
function pageOf(answer) {
  if (Array.isArray(answer)) return { items: answer, nextCursor: null };
  return { items: (answer && answer.items) || [], nextCursor: (answer && answer.nextCursor) || null };
}

async function jobPages(api, pages) {
  const jobs = [];
  let cursor = null;
  for (let n = 0; n < pages; n += 1) {
    const query = cursor ? { limit: JOBS_PAGE, cursor } : { limit: JOBS_PAGE };
    const page = pageOf(await api.get("/api/job/jobs", query));
    jobs.push(...page.items);
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  return { jobs, more: Boolean(cursor) };
}

function enabledBadge(disabled) {
  if (disabled === undefined) return badge("?", "muted");
  return disabled ? badge("disabled", "warn") : badge("enabled", "ok");
}

function select(name, label, options, value) {
  return h(
    "label",
    { class: "filter" },
    h("span", {}, label),
    h(
      "select",
      { name },
      options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)),
    ),
  );
}

export function list(ctx) {
  const { api, query } = ctx;
  const search = h("input", {
    type: "search",
    name: "q",
    placeholder: "Search name, app, description",
    value: query.get("q") || "",
    "aria-label": "Search jobs",
  });
  const appFilter = select("app", "App", [["", "all apps"]], query.get("app") || "");
  const typeFilter = select(
    "type",
    "Type",
    [["", "all types"], ["SIMPLE", "SIMPLE"], ["DATAFLOW", "DATAFLOW"], ["SCRIPT", "SCRIPT"]],
    query.get("type") || "",
  );
  const execFilter = select(
    "exec",
    "Execution",
    [["", "any"], ["TRANSIENT", "TRANSIENT"], ["DAEMON", "DAEMON"]],
    query.get("exec") || "",
  );
  const stateFilter = select(
    "state",
    "State",
    [["", "any"], ["enabled", "enabled"], ["disabled", "disabled"]],
    query.get("state") || "",
  );
  const body = h("div");
  const count = h("span", { class: "muted" });
  let pages = 1;
  // Only there while the server has more jobs than are loaded.
  const more = h("button", { type: "button", class: "button", "data-more": "jobs" }, "More jobs");
  const moreBox = h("p");
  const el = h(
    "div",
    { class: "view" },
    h(
      "div",
      { class: "heading" },
      h("h1", {}, "Jobs ", count),
      ctx.mayAny(EDITOR) ? h("a", { class: "button primary", href: "#/jobs/new", "data-action": "add-job" }, "Add job") : null,
    ),
    h("div", { class: "filters" }, search, appFilter, typeFilter, execFilter, stateFilter),
    body,
    moreBox,
  );

  let data = null;
  const value = (label) => label.querySelector("select").value;
  const render = () => {
    if (!data) return;
    const q = search.value.trim().toLowerCase();
    const rows = data.jobs.filter((job) => {
      if (q && ![job.jobName, job.appName, job.description || ""].some((t) => String(t).toLowerCase().includes(q))) {
        return false;
      }
      if (value(appFilter) && job.appName !== value(appFilter)) return false;
      if (value(typeFilter) && job.jobType !== value(typeFilter)) return false;
      if (value(execFilter) && job.jobExecutionType !== value(execFilter)) return false;
      const disabled = data.disabled.get(job.jobName);
      if (value(stateFilter) === "enabled" && disabled !== false) return false;
      if (value(stateFilter) === "disabled" && disabled !== true) return false;
      return true;
    });
    const loaded = data.more ? `${data.jobs.length} loaded, more on the server` : `${data.jobs.length}`;
    count.textContent = rows.length === data.jobs.length ? `(${loaded})` : `(${rows.length} of ${loaded})`;
    fill(moreBox, data.more ? more : null);
    fill(
      body,
      table(
        [
          { label: "Job", cell: (j) => link(["jobs", j.jobName], j.jobName) },
          { label: "App", cell: (j) => link(["apps", j.appName], j.appName) },
          { label: "Type", cell: (j) => j.jobType },
          { label: "Execution", cell: (j) => j.jobExecutionType },
          {
            label: "Cron / next fire",
            cell: (j) => [h("code", {}, j.cron), h("br"), loadingOr(data, "next", j, nextCell(data.next.get(j.jobName), data.nextKnown))],
          },
          { label: "State", cell: (j) => loadingOr(data, "disabled", j, enabledBadge(data.disabled.get(j.jobName))) },
          { label: "Last run", cell: (j) => loadingOr(data, "last", j, lastCell(data.last.get(j.jobName))) },
        ],
        rows,
        data.jobs.length ? "No job matches the filters." : "No job registered yet.",
        { "data-table": "jobs" },
      ),
    );
  };
  const onFilter = () => {
    ctx.setQuery({
      q: search.value.trim(),
      app: value(appFilter),
      type: value(typeFilter),
      exec: value(execFilter),
      state: value(stateFilter),
    });
    render();
  };
  search.addEventListener("input", onFilter);
  for (const label of [appFilter, typeFilter, execFilter, stateFilter]) {
    label.querySelector("select").addEventListener("change", onFilter);
  }

  const fillApps = (apps) => {
    const appSelect = appFilter.querySelector("select");
    const chosen = ctx.query.get("app") || "";
    fill(
      appSelect,
      h("option", { value: "" }, "all apps"),
      apps.map((a) => h("option", { value: a.appName, selected: a.appName === chosen }, a.appName)),
      // An app named in the link but gone stays chosen, so the filter says what it filters.
      chosen && !apps.some((a) => a.appName === chosen) ? h("option", { value: chosen, selected: true }, chosen) : null,
    );
  };
  const refresh = ctx.every(10000, async () => {
    const [listed, appsAnswer, nextKnown] = await Promise.all([
      jobPages(api, pages),
      api.get("/api/app/list", { limit: APPS_LISTED }),
      api.has("GET", NEXT_PATH),
    ]);
    const { jobs } = listed;
    const apps = pageOf(appsAnswer).items;
    const names = jobs.map((j) => j.jobName);
    if (!ctx.alive) return;
    fillApps(apps);
    // The rows at once (issue 29: each row's state, next fire and last run are three requests,
    // 300 for a page, which kept the page blank for seconds); what a row showed before stays
    // until its new answers are in, the rest shows as loading.
    const before = data;
    data = {
      jobs,
      more: listed.more,
      nextKnown,
      loading: true,
      disabled: before ? before.disabled : new Map(),
      next: before ? before.next : new Map(),
      last: before ? before.last : new Map(),
    };
    render();
    const [disabled, next, last] = await Promise.all([
      mapLimit(names, 4, (n) => api.get(`/api/job/${segment(n)}/disable`)),
      nextKnown
        ? mapLimit(jobs, 4, (j) =>
            // A job without a cron (issue 27) has no fire times to ask for.
            j.cron ? api.get(`/api/job/${segment(j.jobName)}/next-fire-times`, { count: 1 }) : { noCron: true },
          )
        : Promise.resolve([]),
      mapLimit(names, 4, (n) => lastRun(api, n)),
    ]);
    if (!ctx.alive) return;
    data = { jobs, more: listed.more, nextKnown, loading: false, disabled: new Map(), next: new Map(), last: new Map() };
    names.forEach((n, i) => {
      if (typeof disabled[i] === "boolean") data.disabled.set(n, disabled[i]);
      if (nextKnown) data.next.set(n, next[i]);
      data.last.set(n, last[i]);
    });
    render();
  });
  more.addEventListener("click", () => {
    pages += 1;
    refresh.now();
  });
  return el;
}

// A row's cell while its answers are on their way and it has none from before: "…".
function loadingOr(data, key, job, cell) {
  return data.loading && !data[key].has(job.jobName) ? h("span", { class: "muted", "data-loading": key }, "…") : cell;
}

function nextCell(answer, known) {
  if (!known) return h("span", { class: "muted" }, "next fire: n/a");
  if (answer instanceof Error) return h("span", { class: "muted", title: answer.message }, "next fire: ?");
  if (answer && answer.noCron) return h("span", { class: "muted" }, "no cron: fires when triggered or in a workflow");
  const times = (answer && answer.nextFireTimes) || [];
  return times.length ? fireTimeEl(times[0]) : h("span", { class: "muted" }, "no next fire");
}

function lastCell(run) {
  if (!run || run instanceof Error) return h("span", { class: "muted" }, run instanceof Error ? "?" : "never");
  return [resultBadge(run.result), " ", timeEl(run.end || run.start || null)];
}

function describeProperties(props) {
  const entries = Object.entries(props || {}).filter(([, v]) => v !== "" && v !== null && v !== undefined);
  return entries.length ? entries.map(([k, v]) => h("div", {}, h("code", {}, `${k}=${v}`))) : "—";
}

const FIELD_LABELS = {
  jobName: "Name",
  appName: "App",
  jobType: "Type",
  jobExecutionType: "Execution type",
  cron: "Cron",
  timeZone: "Time zone",
  shardingTotalCount: "Shards",
  shardingItemParameters: "Shard parameters",
  jobParameter: "Job parameter",
  jobClass: "Job class",
  scriptCommandLine: "Script command line",
  streamingProcess: "Streaming process",
  cpuCount: "CPUs per shard",
  memoryMB: "Memory per shard (MB)",
  failover: "Failover",
  misfire: "Misfire",
  description: "Description",
  jobProperties: "Job properties",
  beanName: "Bean name",
  applicationContext: "Application context",
  timeoutSeconds: "Timeout (s)",
  maxRetries: "Max retries",
  overlapPolicy: "Overlap policy",
  notifyWebhookUrl: "Failure webhook",
  excludeCalendars: "Excluded by calendars",
  pool: "Pool",
  poolSlots: "Pool slots per shard",
};

function fieldValue(key, value) {
  if (key === "jobProperties") return describeProperties(value);
  if (key === "appName") return link(["apps", value], value);
  if (key === "excludeCalendars") return calendarLinks(value);
  if (key === "pool" && typeof value === "string" && value) return link(["pools", value], value, null, { "data-value": "pool" });
  if (key === "cron" || key === "scriptCommandLine" || key === "jobClass") return h("code", { class: "wrap" }, String(value));
  // A reader is given only scheme://host[:port]/... of a webhook (its path may hold a token).
  if (key === "notifyWebhookUrl" && typeof value === "string" && value.endsWith("/...")) {
    return h("span", {}, h("code", { class: "wrap" }, value), " ", h("span", { class: "muted" }, "(path hidden from your role)"));
  }
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (value === "" || value === null || value === undefined) return h("span", { class: "muted" }, "—");
  if (typeof value === "object") return h("code", { class: "wrap" }, JSON.stringify(value));
  return String(value);
}

export function detail(ctx) {
  const { api } = ctx;
  const name = ctx.params.job;
  const state = h("span");
  const actions = h("div", { class: "actions" });
  const fields = h("div");
  const next = h("div");
  const running = h("div");
  const queue = h("div");
  const runsBox = h("div");
  const backfills = backfillSection(ctx, name);
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["jobs"], "Jobs"), " / "),
    h("div", { class: "heading" }, h("h1", {}, name, " ", state), actions),
    h(
      "div",
      { class: "columns" },
      section("Next fire times", next),
      section("Queue", queue),
    ),
    section("Running tasks", running),
    section("Recent runs", runsBox, h("p", {}, link(["runs"], "All runs of this job", { job: name }))),
    backfills.el,
    skippedFiresSection(ctx, name),
    jobWorkflowsSection(ctx, name),
    section("Definition", fields),
  );
  let latest = null;
  const poll = ctx.every(5000, async () => {
    let job;
    try {
      job = await api.get(`/api/job/jobs/${segment(name)}`);
    } catch (error) {
      if (error.status === 404) {
        fill(fields, h("p", { class: "error" }, error.message));
        for (const box of [actions, next, running, queue, runsBox]) fill(box);
        return;
      }
      throw error;
    }
    const [disabled, tasks, ready, failover, nextKnown, killKnown, taskKillKnown, recent] = await Promise.all([
      api.get(`/api/job/${segment(name)}/disable`),
      api.get("/api/job/tasks/running"),
      api.get("/api/job/tasks/ready"),
      api.get("/api/job/tasks/failover"),
      api.has("GET", NEXT_PATH),
      api.has("POST", KILL_PATH),
      api.has("POST", TASK_KILL_PATH),
      fetchRuns(api, { job: name, limit: 10 }),
    ]);
    let nextTimes = job.cron ? null : []; // a job without a cron (issue 27) has none
    let nextError = "";
    if (nextKnown && job.cron) {
      try {
        const answer = await api.get(`/api/job/${segment(name)}/next-fire-times`, { count: 10 });
        nextTimes = (answer && answer.nextFireTimes) || [];
      } catch (error) {
        nextError = error.message;
      }
    }
    if (!ctx.alive) return;
    const own = tasks.filter((t) => jobOfTask(t) === name);
    const queued = readyCounts(ready).get(name) || 0;
    const failovers = failover.filter((f) => f.taskInfo && f.taskInfo.jobName === name).length;
    latest = { job, disabled, running: own.length, queued, killKnown };
    backfills.update(job);
    fill(state, enabledBadge(disabled));
    fill(
      fields,
      fieldList(Object.entries(job).map(([key, value]) => [FIELD_LABELS[key] || key, fieldValue(key, value)])),
    );
    if (!nextKnown) fill(next, note(NOT_AVAILABLE));
    else if (nextError) fill(next, h("p", { class: "error" }, nextError));
    else {
      fill(
        next,
        nextTimes.length
          ? h("ol", { class: "fire-times", "data-list": "next-fire-times" }, nextTimes.map((t) => h("li", {}, fireTimeEl(t))))
          : note(
              !job.cron
                ? "No cron: the job fires only when triggered or in a workflow."
                : disabled
                  ? "The job is disabled: it does not fire."
                  : "No future fire time.",
            ),
        disabled && nextTimes.length ? note("The job is disabled: these fires will not run until it is enabled.") : null,
      );
    }
    fill(
      queue,
      fieldList([
        ["Queued runs", String(queued)],
        ["Failover entries", String(failovers)],
        ["Running tasks", String(own.length)],
        // Issue 28: what may hold its runs back or skip its fires.
        job.pool ? ["Pool", [link(["pools", job.pool], job.pool), ` (${job.poolSlots ?? 1} slot${(job.poolSlots ?? 1) === 1 ? "" : "s"} a shard)`]] : null,
        Array.isArray(job.excludeCalendars) && job.excludeCalendars.length
          ? ["Skips fires in", job.excludeCalendars.map((n, i) => [i ? ", " : "", link(["calendars", n], n)])]
          : null,
      ].filter(Boolean)),
    );
    fill(
      running,
      table(
        [
          { label: "Shard", cell: (t) => shardsOfTask(t) },
          { label: "Host", cell: (t) => t.hostname || t.slaveId || "—" },
          { label: "Type", cell: (t) => t.type || "—" },
          { label: "Since", cell: (t) => timeEl(t.launchedAt || null) },
          { label: "Task", cell: (t) => link(["runs", name, t.id], t.id, null, { class: "task-id" }) },
          ctx.may(OPERATOR, job.appName) && taskKillKnown
            ? {
                label: "",
                cell: (t) =>
                  actionButton("Kill", async () => {
                    if (!(await confirmDialog({ title: "Kill this task?", lines: [t.id, "A killed task is not relaunched."], confirmText: "Kill", danger: true }))) return;
                    await api.post(`/api/job/tasks/${segment(t.id)}/kill`);
                    toast("Kill sent");
                    await poll.now();
                  }, { class: "small danger" }),
              }
            : null,
        ].filter(Boolean),
        own,
        "No task of this job is running.",
        { "data-table": "running" },
      ),
    );
    fill(
      runsBox,
      table(
        [
          { label: "Started", cell: (r) => timeEl(r.start) },
          { label: "Fire", cell: (r) => fireCell(r) },
          { label: "Shard", cell: (r) => String(r.shard) },
          { label: "Result", cell: (r) => resultCell(r) },
          { label: "Duration", cell: (r) => (r.start && r.end ? duration(r.end - r.start) : "—") },
          { label: "Reason", cell: (r) => h("span", { class: "reason" }, r.reason || "") },
          { label: "", cell: (r) => (r.taskId ? link(["runs", name, r.taskId], "details") : "") },
        ],
        recent.runs.slice(0, 10),
        "No run recorded yet.",
        { "data-table": "recent-runs" },
      ),
    );
    if (!actions.childElementCount) fill(actions, writeActions(job.appName));
    const toggle = actions.querySelector("[data-action=toggle]");
    if (toggle) toggle.textContent = disabled ? "Enable" : "Disable";
    const trigger = actions.querySelector("[data-action=trigger]");
    if (trigger) trigger.hidden = job.jobExecutionType === "DAEMON";
    const kill = actions.querySelector("[data-action=kill]");
    if (kill) kill.hidden = !killKnown;
  });

  // Only the controls the caller's role on the job's app allows.
  function writeActions(app) {
    const operate = ctx.may(OPERATOR, app);
    const edit = ctx.may(EDITOR, app);
    return [
      edit ? h("a", { class: "button", href: href(["jobs", name, "edit"]), "data-action": "edit" }, "Edit") : null,
      !operate ? null : actionButton(
        "Trigger",
        async () => {
          await api.post("/api/job/trigger", { jobName: name });
          toast(`Job ${name} triggered: a run is queued`);
          await poll.now();
        },
        { "data-action": "trigger" },
      ),
      !operate ? null : actionButton(
        "Disable",
        async () => {
          const wasDisabled = latest && latest.disabled;
          await api.post(`/api/job/${segment(name)}/${wasDisabled ? "enable" : "disable"}`);
          toast(wasDisabled ? `Job ${name} enabled` : `Job ${name} disabled: queued runs dropped`);
          await poll.now();
        },
        { "data-action": "toggle" },
      ),
      !operate ? null : actionButton(
        "Kill",
        async () => {
          const count = latest ? latest.running : 0;
          const ok = await confirmDialog({
            title: `Kill the running tasks of ${name}?`,
            lines: [`${count} task${count === 1 ? " is" : "s are"} running now. Killed tasks are not relaunched.`],
            confirmText: "Kill",
            danger: true,
          });
          if (!ok) return;
          await api.post(`/api/job/${segment(name)}/kill`);
          toast(`Kill sent to the tasks of ${name}`);
          await poll.now();
        },
        { class: "danger", "data-action": "kill", hidden: true },
      ),
      !edit ? null : actionButton(
        "Delete",
        async () => {
          const lines = [
            latest && latest.running
              ? `Its ${latest.running} running task${latest.running > 1 ? "s are" : " is"} killed.`
              : "No task of it is running.",
            latest && latest.queued
              ? `Its ${latest.queued} queued run${latest.queued > 1 ? "s are" : " is"} dropped, with its failover entries.`
              : "Its queued and failover runs (if any) are dropped.",
            "The run history stays in the event trace.",
          ];
          if (!(await confirmDialog({ title: `Delete job ${name}?`, lines, confirmText: "Delete job", danger: true }))) return;
          await api.del(`/api/job/${segment(name)}/deregister`);
          toast(`Job ${name} deleted`);
          location.hash = "#/jobs";
        },
        { class: "danger", "data-action": "delete" },
      ),
    ].filter(Boolean);
  }
  return el;
}
