// Apps: list, detail, add and edit, disable/enable and delete. The list is the apps the caller
// may see (the API filters it); each control shows only where the caller's role allows it:
// adding an app for cluster-admins, disable/enable from operator, edit from editor, delete from
// app-admin.

import { segment } from "../api.js";
import { jobOfTask, mapLimit } from "../data.js";
import {
  actionButton,
  badge,
  checkboxField,
  confirmDialog,
  field,
  fieldList,
  fill,
  h,
  href,
  link,
  numberOrText,
  section,
  showFieldErrors,
  table,
  toast,
} from "../dom.js";
import { APP_ADMIN, EDITOR, OPERATOR } from "../rights.js";

async function appStates(api, apps) {
  const answers = await mapLimit(apps, 6, (app) => api.get(`/api/app/${segment(app.appName)}/disable`));
  const disabled = new Map();
  apps.forEach((app, i) => disabled.set(app.appName, answers[i] === true));
  return disabled;
}

function enabledBadge(disabled) {
  return disabled ? badge("disabled", "warn") : badge("enabled", "ok");
}

export function list(ctx) {
  const { api } = ctx;
  const body = h("div");
  const el = h(
    "div",
    { class: "view" },
    h(
      "div",
      { class: "heading" },
      h("h1", {}, "Apps"),
      ctx.rights.isClusterAdmin
        ? h("a", { class: "button primary", href: "#/apps/new", "data-action": "add-app" }, "Add app")
        : null,
    ),
    body,
  );
  ctx.every(10000, async () => {
    const [apps, jobs] = await Promise.all([api.get("/api/app/list"), api.get("/api/job/jobs")]);
    const disabled = await appStates(api, apps);
    if (!ctx.alive) return;
    const jobCounts = new Map();
    for (const job of jobs) jobCounts.set(job.appName, (jobCounts.get(job.appName) || 0) + 1);
    fill(
      body,
      table(
        [
          { label: "App", cell: (a) => link(["apps", a.appName], a.appName) },
          { label: "State", cell: (a) => enabledBadge(disabled.get(a.appName)) },
          { label: "Jobs", cell: (a) => link(["jobs"], String(jobCounts.get(a.appName) || 0), { app: a.appName }) },
          { label: "Executor", cell: (a) => `${a.cpuCount} CPU, ${a.memoryMB} MB` },
          { label: "App URL", cell: (a) => h("code", { class: "wrap" }, a.appURL) },
          { label: "Bootstrap", cell: (a) => h("code", { class: "wrap" }, a.bootstrapScript) },
        ],
        apps,
        "No app registered yet.",
        { "data-table": "apps" },
      ),
    );
  });
  return el;
}

export function detail(ctx) {
  const { api } = ctx;
  const name = ctx.params.app;
  const state = h("span");
  const actions = h("div", { class: "actions" });
  const fields = h("div");
  const jobsBox = h("div");
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["apps"], "Apps"), " / "),
    h("div", { class: "heading" }, h("h1", {}, name, " ", state), actions),
    section("Definition", fields),
    section("Jobs of this app", jobsBox),
  );
  let latest = null;
  const poll = ctx.every(5000, async () => {
    let app;
    try {
      app = await api.get(`/api/app/${segment(name)}`);
    } catch (error) {
      if (error.status === 404) {
        fill(fields, h("p", { class: "error" }, error.message));
        fill(actions);
        fill(jobsBox);
        return;
      }
      throw error;
    }
    const [disabled, jobs, tasks] = await Promise.all([
      api.get(`/api/app/${segment(name)}/disable`),
      api.get("/api/job/jobs"),
      api.get("/api/job/tasks/running"),
    ]);
    if (!ctx.alive) return;
    const own = jobs.filter((j) => j.appName === name);
    const ownNames = new Set(own.map((j) => j.jobName));
    latest = { app, disabled, jobs: own, running: tasks.filter((t) => ownNames.has(jobOfTask(t))).length };
    fill(state, enabledBadge(disabled));
    fill(
      fields,
      fieldList([
        ["App URL", h("code", { class: "wrap" }, app.appURL)],
        ["Bootstrap script", h("code", { class: "wrap" }, app.bootstrapScript)],
        ["Executor CPUs", String(app.cpuCount)],
        ["Executor memory", `${app.memoryMB} MB`],
        ["Fetcher cache", app.appCacheEnable ? "on" : "off"],
        ["Trace sampling", app.eventTraceSamplingCount ? `every ${app.eventTraceSamplingCount}th daemon run` : "every run"],
      ]),
    );
    fill(
      jobsBox,
      table(
        [
          { label: "Job", cell: (j) => link(["jobs", j.jobName], j.jobName) },
          { label: "Type", cell: (j) => j.jobType },
          { label: "Execution", cell: (j) => j.jobExecutionType },
          { label: "Cron", cell: (j) => h("code", {}, j.cron) },
        ],
        own,
        "No job uses this app.",
      ),
    );
    if (!actions.childElementCount) fill(actions, writeActions());
    const toggle = actions.querySelector("[data-action=toggle]");
    if (toggle) toggle.textContent = disabled ? "Enable" : "Disable";
  });

  // Only the controls the caller's role on this app allows.
  function writeActions() {
    return [
      ctx.may(EDITOR, name)
        ? h("a", { class: "button", href: href(["apps", name, "edit"]), "data-action": "edit" }, "Edit")
        : null,
      !ctx.may(OPERATOR, name) ? null : actionButton(
        "Disable",
        async () => {
          const wasDisabled = latest && latest.disabled;
          await api.post(`/api/app/${segment(name)}/${wasDisabled ? "enable" : "disable"}`);
          toast(wasDisabled ? `App ${name} enabled` : `App ${name} disabled: its jobs no longer fire`);
          await poll.now();
        },
        { "data-action": "toggle" },
      ),
      !ctx.may(APP_ADMIN, name) ? null : actionButton(
        "Delete",
        async () => {
          const jobs = latest ? latest.jobs.map((j) => j.jobName) : [];
          const lines = [
            jobs.length
              ? `Its ${jobs.length} job${jobs.length > 1 ? "s go" : " goes"} with it: ${jobs.join(", ")}.`
              : "No job uses it.",
            latest && latest.running
              ? `${latest.running} running task${latest.running > 1 ? "s are" : " is"} killed, and the app's executors are stopped.`
              : "Its executors are stopped; queued and failover runs of its jobs are dropped.",
            "The run history stays in the event trace.",
          ];
          if (!(await confirmDialog({ title: `Delete app ${name}?`, lines, confirmText: "Delete app", danger: true }))) return;
          await api.del(`/api/app/${segment(name)}`);
          toast(`App ${name} deleted`);
          location.hash = "#/apps";
        },
        { class: "danger", "data-action": "delete" },
      ),
    ].filter(Boolean);
  }
  return el;
}

// Add (no :app) or edit (#/apps/NAME/edit).
export function form(ctx) {
  const { api } = ctx;
  const editing = ctx.params.app || null;
  // Editors of the app change it; only cluster-admins add apps.
  const allowed = editing ? ctx.may(EDITOR, editing) : ctx.rights.isClusterAdmin;
  const inputs = {
    appName: h("input", { name: "appName", required: true, autocomplete: "off", readonly: Boolean(editing) }),
    appURL: h("input", { name: "appURL", required: true, placeholder: "http://repo.example/app.tar.gz", autocomplete: "off" }),
    bootstrapScript: h("input", { name: "bootstrapScript", required: true, placeholder: "bin/start.sh", autocomplete: "off" }),
    cpuCount: h("input", { name: "cpuCount", inputmode: "decimal", value: "1" }),
    memoryMB: h("input", { name: "memoryMB", inputmode: "decimal", value: "128" }),
    appCacheEnable: h("input", { name: "appCacheEnable", type: "checkbox", checked: true }),
    eventTraceSamplingCount: h("input", { name: "eventTraceSamplingCount", inputmode: "numeric", value: "0" }),
  };
  const general = h("p", { class: "error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, editing ? "Save" : "Add app");
  const formEl = h(
    "form",
    { class: "card form", novalidate: true, "data-form": "app" },
    general,
    h(
      "div",
      { class: "grid" },
      field("Name", inputs.appName, editing ? "The name cannot change." : "Letters, digits, _ . - (the first not . or -)."),
      field("App URL", inputs.appURL, "Where agents fetch the app's archive (http://, https://, file://, hdfs://...)."),
      field("Bootstrap script", inputs.bootstrapScript, "The executor's command, run in the unpacked archive."),
      field("Executor CPUs", inputs.cpuCount, "Charged once per agent."),
      field("Executor memory (MB)", inputs.memoryMB),
      field("Trace sampling", inputs.eventTraceSamplingCount, "Daemon jobs trace every Nth run; 0 traces all."),
      checkboxField("Cache the archive on agents", inputs.appCacheEnable),
    ),
    h(
      "div",
      { class: "actions" },
      h("a", { class: "button secondary", href: editing ? href(["apps", editing]) : "#/apps" }, "Cancel"),
      submit,
    ),
  );
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["apps"], "Apps"), " / "),
    h("h1", {}, editing ? `Edit app ${editing}` : "Add an app"),
    allowed
      ? formEl
      : h("p", { class: "note" }, editing ? "Read-only: your role may not change this app." : "Read-only: only a cluster-admin adds apps."),
  );
  if (editing) {
    api.get(`/api/app/${segment(editing)}`).then(
      (app) => {
        for (const [key, input] of Object.entries(inputs)) {
          if (input.type === "checkbox") input.checked = Boolean(app[key]);
          else if (app[key] !== undefined && app[key] !== null) input.value = String(app[key]);
        }
      },
      (error) => showFieldErrors(formEl, {}, general, error.message),
    );
  }
  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      appName: inputs.appName.value.trim(),
      appURL: inputs.appURL.value.trim(),
      bootstrapScript: inputs.bootstrapScript.value.trim(),
      cpuCount: numberOrText(inputs.cpuCount.value),
      memoryMB: numberOrText(inputs.memoryMB.value),
      appCacheEnable: inputs.appCacheEnable.checked,
      eventTraceSamplingCount: numberOrText(inputs.eventTraceSamplingCount.value),
    };
    submit.disabled = true;
    try {
      if (editing) await api.put("/api/app", body);
      else await api.post("/api/app", body);
      toast(editing ? `App ${body.appName} saved` : `App ${body.appName} added`);
      location.hash = href(["apps", body.appName]);
    } catch (error) {
      showFieldErrors(formEl, error.fields, general, error.message);
    } finally {
      submit.disabled = false;
    }
  });
  return el;
}
