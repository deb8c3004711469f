// Adding and editing a job, with the API's messages next to each field and a live preview of
// the next fire times of the cron being typed. Jobs are registered under an app by its editors:
// the app list offers only the apps the caller edits (the API checks anyway).

import { segment } from "../api.js";
import { CALENDARS_PATH, CRON_PATH, POOLS_PATH, serves } from "../data.js";
import {
  checkboxField,
  debounce,
  field,
  fill,
  fireTimeEl,
  h,
  href,
  link,
  note,
  numberOrText,
  showFieldErrors,
  toast,
} from "../dom.js";
import { EDITOR } from "../rights.js";
import { allCalendars } from "./calendars.js";
import { allPools } from "./pools.js";

const PREVIEW_COUNT = 5;
// Fields beyond the original's, shown only when this leader's API documents them.
const OPTIONAL_FIELDS = ["timeoutSeconds", "maxRetries", "overlapPolicy", "notifyWebhookUrl"];
const PROPERTY_KEYS = ["job_exception_handler", "executor_service_handler"];
// Issue 28's fields, shown when this leader documents them or serves their lists.
const SCHEDULING_FIELDS = ["excludeCalendars", "pool", "poolSlots"];

function input(name, attrs) {
  return h("input", { name, autocomplete: "off", ...(attrs || {}) });
}

function choice(name, options, attrs) {
  return h("select", { name, ...(attrs || {}) }, options.map(([v, text]) => h("option", { value: v }, text)));
}

export function form(ctx) {
  const { api } = ctx;
  const editing = ctx.params.job || null;
  const inputs = {
    jobName: input("jobName", { required: true, readonly: Boolean(editing) }),
    appName: choice("appName", [["", "choose an app"]]),
    jobType: choice("jobType", [["SCRIPT", "SCRIPT (a shell command)"], ["SIMPLE", "SIMPLE (Python callable)"], ["DATAFLOW", "DATAFLOW (fetch and process)"]]),
    jobExecutionType: choice("jobExecutionType", [["TRANSIENT", "TRANSIENT (a task per fire)"], ["DAEMON", "DAEMON (long-running)"]]),
    cron: input("cron", { required: true, placeholder: "0/30 * * * * ?", spellcheck: "false" }),
    timeZone: input("timeZone", { placeholder: "the scheduler's default" }),
    shardingTotalCount: input("shardingTotalCount", { inputmode: "numeric", value: "1" }),
    shardingItemParameters: input("shardingItemParameters", { placeholder: "0=a,1=b" }),
    jobParameter: input("jobParameter"),
    jobClass: input("jobClass", { placeholder: "package.module:function" }),
    scriptCommandLine: input("scriptCommandLine", { placeholder: "sh run.sh" }),
    streamingProcess: input("streamingProcess", { type: "checkbox" }),
    cpuCount: input("cpuCount", { inputmode: "decimal", value: "0.5" }),
    memoryMB: input("memoryMB", { inputmode: "decimal", value: "128" }),
    failover: input("failover", { type: "checkbox" }),
    // Off by default, as the API and the CLI default it (issue 30: the form said on).
    misfire: input("misfire", { type: "checkbox" }),
    description: h("textarea", { name: "description", rows: 2 }),
    timeoutSeconds: input("timeoutSeconds", { inputmode: "numeric" }),
    maxRetries: input("maxRetries", { inputmode: "numeric" }),
    overlapPolicy: choice("overlapPolicy", [["", "default (FORBID)"], ["FORBID", "FORBID"], ["ALLOW", "ALLOW"], ["REPLACE", "REPLACE"]]),
    notifyWebhookUrl: input("notifyWebhookUrl", { placeholder: "https://hooks.example/ejcloud" }),
  };
  // Not in `inputs`: filled from the lists of calendars and pools, read and sent apart.
  const scheduling = {
    excludeCalendars: h("select", { name: "excludeCalendars", multiple: true, size: 5 }),
    pool: choice("pool", [["", "no pool"]]),
    poolSlots: input("poolSlots", { inputmode: "numeric", placeholder: "1" }),
  };
  const props = Object.fromEntries(PROPERTY_KEYS.map((k) => [k, input(`jobProperties.${k}`)]));
  const general = h("p", { class: "error", role: "alert", hidden: true });
  const preview = h("div", { class: "preview", "data-preview": "cron", "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary" }, editing ? "Save" : "Add job");
  const optionalBox = h("details", { class: "optional", hidden: true }, h("summary", {}, "Timeouts, retries, overlap, webhook"));
  const schedulingBox = h("details", { class: "optional", hidden: true, "data-box": "scheduling" }, h("summary", {}, "Calendars and concurrency pool"));
  const boxes = {};
  const place = (label, control, help) => {
    const box = control.type === "checkbox" ? checkboxField(label, control, help) : field(label, control, help);
    boxes[control.name] = box;
    return box;
  };
  const formEl = h(
    "form",
    { class: "card form", novalidate: true, "data-form": "job" },
    general,
    h(
      "div",
      { class: "grid" },
      place("Name", inputs.jobName, editing ? "The name cannot change." : "Letters, digits, _ . - (the first not . or -)."),
      place("App", inputs.appName),
      place("Type", inputs.jobType),
      place("Execution type", inputs.jobExecutionType),
      h(
        "div",
        { class: "span2 cron-row" },
        place("Cron", inputs.cron, "Quartz with seconds (0/30 * * * * ?) or a 5-field crontab."),
        place("Time zone", inputs.timeZone, "IANA name, e.g. Europe/Berlin."),
        h("div", { class: "preview-box" }, h("span", { class: "label" }, "Next fire times"), preview),
      ),
      place("Script command line", inputs.scriptCommandLine, "Run in the app's sandbox with the sharding context as its argument."),
      place("Job class", inputs.jobClass, "Python code the executor runs: package.module:callable or package.module.Class."),
      place("Shards", inputs.shardingTotalCount),
      place("Shard parameters", inputs.shardingItemParameters, "item=value pairs, comma separated."),
      place("Job parameter", inputs.jobParameter),
      place("CPUs per shard", inputs.cpuCount),
      place("Memory per shard (MB)", inputs.memoryMB),
      place("Failover: relaunch failed shards", inputs.failover),
      place("Misfire: run fires that fell while busy or leaderless", inputs.misfire),
      place("Streaming process (DATAFLOW)", inputs.streamingProcess),
      h("div", { class: "span2" }, place("Description", inputs.description)),
      place("Job exception handler", props.job_exception_handler),
      place("Executor service handler", props.executor_service_handler),
    ),
    optionalBox,
    schedulingBox,
    h(
      "div",
      { class: "actions" },
      h("a", { class: "button secondary", href: editing ? href(["jobs", editing]) : "#/jobs" }, "Cancel"),
      submit,
    ),
  );
  optionalBox.append(
    h(
      "div",
      { class: "grid" },
      place("Timeout (seconds)", inputs.timeoutSeconds, "A run still going this long after it started is stopped and fails."),
      place("Max retries", inputs.maxRetries, "Relaunches of a failed shard per fire; empty: unlimited."),
      place("Overlap policy", inputs.overlapPolicy, "A fire while the job runs: wait or skip (FORBID), run beside (ALLOW), replace (REPLACE)."),
      place("Failure webhook URL", inputs.notifyWebhookUrl, "POSTed a JSON event when a run fails for good."),
    ),
  );
  schedulingBox.append(
    h(
      "div",
      { class: "grid" },
      place("Excluded by calendars", scheduling.excludeCalendars, "Fires in the periods these calendars exclude are skipped (and recorded). Ctrl/Cmd-click picks several."),
      h(
        "div",
        { class: "field-stack" },
        place("Pool", scheduling.pool, "At most the pool's size of slots run at once across its jobs; the rest wait in the queue."),
        place("Pool slots per shard", scheduling.poolSlots, "Slots one shard (task) takes while it runs; empty: 1."),
      ),
    ),
  );
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["jobs"], "Jobs"), " / "),
    h("h1", {}, editing ? `Edit job ${editing}` : "Add a job"),
    ctx.mayAny(EDITOR) ? formEl : note("Read-only: your role may not change jobs."),
  );

  // Only what the chosen type uses is shown and sent.
  const showFor = () => {
    const type = inputs.jobType.value;
    boxes.scriptCommandLine.hidden = type !== "SCRIPT";
    boxes.jobClass.hidden = type === "SCRIPT";
    boxes.streamingProcess.hidden = type !== "DATAFLOW";
  };
  inputs.jobType.addEventListener("change", showFor);
  showFor();

  let stored = null;
  let optional = [];
  let schedulingShown = [];
  let cronPreview = null;

  // --- the live preview of the cron being typed ---------------------------------------------
  let previewSeq = 0;
  const updatePreview = async () => {
    if (cronPreview === null) return;
    if (!cronPreview) {
      fill(preview, note("Preview not available on this server (its API has no /api/cron/next-fire-times yet).", "note small"));
      preview.dataset.state = "unavailable";
      return;
    }
    const cron = inputs.cron.value.trim();
    if (!cron) {
      fill(preview, h("span", { class: "muted" }, "Type a cron expression."));
      preview.dataset.state = "empty";
      return;
    }
    const seq = ++previewSeq;
    try {
      const answer = await api.get(CRON_PATH, { cron, timeZone: inputs.timeZone.value.trim(), count: PREVIEW_COUNT });
      if (seq !== previewSeq || !ctx.alive) return;
      const times = (answer && answer.nextFireTimes) || [];
      fill(
        preview,
        times.length
          ? h("ol", { class: "fire-times" }, times.map((t) => h("li", {}, fireTimeEl(t))))
          : h("span", { class: "muted" }, "It never fires."),
      );
      preview.dataset.state = "times";
    } catch (error) {
      if (seq !== previewSeq || !ctx.alive) return;
      fill(preview, h("span", { class: "error" }, error.message));
      preview.dataset.state = "error";
    }
  };
  const schedulePreview = debounce(updatePreview, 300);
  inputs.cron.addEventListener("input", schedulePreview);
  inputs.timeZone.addEventListener("input", schedulePreview);

  // Nothing can be changed until the form is filled: a calendar picked while the stored job
  // was still on its way was unpicked when it came (aria-disabled: Playwright waits too).
  formEl.inert = true;
  formEl.setAttribute("aria-busy", "true");
  formEl.setAttribute("aria-disabled", "true");
  const ready = (async () => {
    const [appList, docs] = await Promise.all([api.get("/api/app/list"), api.docs()]);
    if (!ctx.alive) return;
    await loadScheduling(docs);
    if (!ctx.alive) return;
    const apps = Array.isArray(appList) ? appList : (appList && appList.items) || [];
    for (const app of apps) {
      if (ctx.may(EDITOR, app.appName)) inputs.appName.append(h("option", { value: app.appName }, app.appName));
    }
    const preset = ctx.query.get("app");
    if (preset) inputs.appName.value = preset;
    optional = OPTIONAL_FIELDS.filter((name) => docs.jobFields.has(name));
    for (const name of OPTIONAL_FIELDS) boxes[name].hidden = !optional.includes(name);
    optionalBox.hidden = optional.length === 0;
    cronPreview = docs.paths.has(`GET ${CRON_PATH}`);
    if (editing) {
      stored = await api.get(`/api/job/jobs/${segment(editing)}`);
      if (!ctx.alive) return;
      if (!ctx.may(EDITOR, stored.appName)) {
        formEl.replaceWith(note(`Read-only: your role may not change the jobs of app ${stored.appName}.`));
        return;
      }
      for (const [key, control] of Object.entries(inputs)) {
        const value = stored[key];
        if (value === undefined || value === null) continue;
        if (control.type === "checkbox") control.checked = Boolean(value);
        else control.value = String(value);
      }
      for (const key of PROPERTY_KEYS) props[key].value = (stored.jobProperties && stored.jobProperties[key]) || "";
      if (optional.some((name) => stored[name] !== undefined && stored[name] !== null)) optionalBox.open = true;
      fillScheduling(stored);
      showFor();
    }
    updatePreview();
  })()
    .catch((error) => showFieldErrors(formEl, {}, general, error.message))
    .finally(() => {
      formEl.inert = false;
      formEl.removeAttribute("aria-busy");
      formEl.removeAttribute("aria-disabled");
    });

  // --- calendars and pool (issue 28) --------------------------------------------------------
  const addOption = (select, value, text) => {
    if (![...select.options].some((o) => o.value === value)) select.append(h("option", { value }, text || value));
  };
  async function loadScheduling(docs) {
    const [calendarsServed, poolsServed] = await Promise.all([
      serves(api, CALENDARS_PATH, CALENDARS_PATH, { limit: 1 }).catch(() => false),
      serves(api, POOLS_PATH, POOLS_PATH, { limit: 1 }).catch(() => false),
    ]);
    const [calendars, pools] = await Promise.all([
      calendarsServed ? allCalendars(api).catch(() => ({ items: [] })) : { items: [] },
      poolsServed ? allPools(api).catch(() => ({ items: [] })) : { items: [] },
    ]);
    for (const c of calendars.items) addOption(scheduling.excludeCalendars, c.calendarName, `${c.calendarName} (${c.timeZone || "?"})`);
    for (const p of pools.items) addOption(scheduling.pool, p.poolName, `${p.poolName} (size ${p.size ?? "?"})`);
    schedulingShown = SCHEDULING_FIELDS.filter(
      (name) => docs.jobFields.has(name) || (name === "excludeCalendars" ? calendarsServed : poolsServed),
    );
    for (const name of SCHEDULING_FIELDS) boxes[name].hidden = !schedulingShown.includes(name);
    schedulingBox.hidden = schedulingShown.length === 0;
  }
  // A stored job's values; a name no longer listed stays chosen, so a save does not drop it.
  function fillScheduling(job) {
    const names = Array.isArray(job.excludeCalendars) ? job.excludeCalendars.map(String) : [];
    for (const name of names) addOption(scheduling.excludeCalendars, name);
    for (const option of scheduling.excludeCalendars.options) option.selected = names.includes(option.value);
    if (typeof job.pool === "string" && job.pool) {
      addOption(scheduling.pool, job.pool);
      scheduling.pool.value = job.pool;
    }
    if (job.poolSlots !== undefined && job.poolSlots !== null) scheduling.poolSlots.value = String(job.poolSlots);
    if (names.length || job.pool) schedulingBox.open = true;
  }
  function schedulingBody(out) {
    const was = (name) => Boolean(stored) && stored[name] !== undefined && stored[name] !== null;
    if (schedulingShown.includes("excludeCalendars")) {
      const chosen = [...scheduling.excludeCalendars.selectedOptions].map((o) => o.value);
      if (chosen.length) out.excludeCalendars = chosen;
      else if (was("excludeCalendars")) out.excludeCalendars = null;
    }
    if (schedulingShown.includes("pool")) {
      const pool = scheduling.pool.value;
      const slots = scheduling.poolSlots.value.trim();
      if (pool) {
        out.pool = pool;
        if (slots) out.poolSlots = numberOrText(slots);
        else if (was("poolSlots")) out.poolSlots = null;
      } else {
        // Out of its pool: both go (poolSlots alone is refused); a slots value typed without a
        // pool is sent, so the API says why it means nothing.
        if (was("pool")) out.pool = null;
        if (slots) out.poolSlots = numberOrText(slots);
        else if (was("poolSlots")) out.poolSlots = null;
      }
    }
    return out;
  }

  // --- submit -------------------------------------------------------------------------------
  const text = (name) => inputs[name].value.trim();
  const body = () => {
    const type = inputs.jobType.value;
    const out = {
      jobName: text("jobName"),
      appName: inputs.appName.value,
      jobType: type,
      jobExecutionType: inputs.jobExecutionType.value,
      cron: text("cron"),
      shardingTotalCount: numberOrText(inputs.shardingTotalCount.value),
      shardingItemParameters: text("shardingItemParameters"),
      jobParameter: text("jobParameter"),
      cpuCount: numberOrText(inputs.cpuCount.value),
      memoryMB: numberOrText(inputs.memoryMB.value),
      failover: inputs.failover.checked,
      misfire: inputs.misfire.checked,
      description: inputs.description.value,
    };
    const zone = text("timeZone");
    if (zone) out.timeZone = zone;
    else if (stored && stored.timeZone) out.timeZone = null;
    if (type === "SCRIPT") out.scriptCommandLine = text("scriptCommandLine");
    else out.jobClass = text("jobClass");
    if (type === "DATAFLOW") out.streamingProcess = inputs.streamingProcess.checked;
    const properties = {};
    for (const key of PROPERTY_KEYS) {
      const value = props[key].value.trim();
      if (value) properties[key] = value;
    }
    if (Object.keys(properties).length || (stored && stored.jobProperties)) out.jobProperties = properties;
    for (const name of optional) {
      const raw = inputs[name].value.trim();
      const wasSet = stored && stored[name] !== undefined && stored[name] !== null;
      if (raw) out[name] = name === "timeoutSeconds" || name === "maxRetries" ? numberOrText(raw) : raw;
      else if (wasSet) out[name] = null; // the API's update drops a field sent as null
    }
    return schedulingBody(out);
  };
  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    await ready;
    const job = body();
    submit.disabled = true;
    try {
      if (editing) await api.put("/api/job/update", job);
      else await api.post("/api/job/register", job);
      toast(editing ? `Job ${job.jobName} saved` : `Job ${job.jobName} added`);
      location.hash = href(["jobs", job.jobName]);
    } catch (error) {
      showFieldErrors(formEl, error.fields, general, error.message);
    } finally {
      submit.disabled = false;
    }
  });
  return el;
}
