// Calendars (issue 28): named sets of excluded periods in a time zone (dates, date-time ranges,
// weekly windows, yearly dates) that a job's `excludeCalendars` skips. The list, one calendar's
// parts in words with the jobs that use it, and a form: a JSON editor of the parts and an
// iCalendar (.ics) file, which the API converts into parts (`ics`).
//
// Calendars are cluster-wide: any logged-in principal reads them; writing takes `editor` on every
// app (a cluster-admin, or an editor grant on `*`), so the controls show only for such a role.

import { segment } from "../api.js";
import { CALENDARS_PATH, serves } from "../data.js";
import {
  deleteButton,
  field,
  fieldList,
  fill,
  h,
  href,
  link,
  note,
  section,
  showFieldErrors,
  table,
  toast,
} from "../dom.js";
import { EDITOR } from "../rights.js";

const PAGE = 1000;
const MAX_PAGES = 10;
const ICS_MAX_BYTES = 256 * 1024;
const PARTS = ["excludeDates", "excludeRanges", "weekly", "yearly"];
const DAY_NAMES = { MON: "Mon", TUE: "Tue", WED: "Wed", THU: "Thu", FRI: "Fri", SAT: "Sat", SUN: "Sun" };
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const NOT_AVAILABLE = "Calendars are not available on this server (its API has no /api/calendars yet).";
const EXAMPLE = {
  excludeDates: ["2026-12-25"],
  excludeRanges: [],
  weekly: [{ days: ["SAT"], from: "02:00", to: "04:00" }],
  yearly: [],
};

const base = (name) => `/api/calendar/${segment(name)}`;

// Whether the principal may write cluster-wide objects (calendars, pools): editor on every app.
export function mayWriteShared(ctx) {
  return ctx.rights.mayEverywhere(EDITOR);
}

export function pageOf(answer) {
  if (Array.isArray(answer)) return { items: answer, nextCursor: null };
  return { items: (answer && answer.items) || [], nextCursor: (answer && answer.nextCursor) || null };
}

// Every calendar (up to MAX_PAGES pages of PAGE): {items, more}.
export async function allCalendars(api) {
  const items = [];
  let cursor = null;
  for (let n = 0; n < MAX_PAGES; n += 1) {
    const page = pageOf(await api.get(CALENDARS_PATH, cursor ? { limit: PAGE, cursor } : { limit: PAGE }));
    items.push(...page.items.filter((c) => c && typeof c === "object" && typeof c.calendarName === "string"));
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  return { items, more: Boolean(cursor) };
}

const list = (value) => (Array.isArray(value) ? value : []);

// "3 dates, 1 range, 2 weekly windows" for a table cell.
function partsSummary(calendar) {
  const counts = [
    [list(calendar.excludeDates).length, "date", "dates"],
    [list(calendar.excludeRanges).length, "range", "ranges"],
    [list(calendar.weekly).length, "weekly window", "weekly windows"],
    [list(calendar.yearly).length, "yearly date", "yearly dates"],
  ].filter(([n]) => n > 0);
  return counts.length ? counts.map(([n, one, many]) => `${n} ${n === 1 ? one : many}`).join(", ") : "nothing";
}

// A weekly window in words: "Sat, Sun 22:00 – 02:00 (into the next day)".
export function weeklyText(window) {
  const days = list(window && window.days).map((d) => DAY_NAMES[String(d).toUpperCase()] || String(d));
  const from = String((window && window.from) || "?");
  const to = String((window && window.to) || "?");
  const across = from > to ? " (into the next day)" : "";
  return `${days.join(", ")} ${from} – ${to}${across}`;
}

// A yearly date "12-25" in words: "every 25 Dec".
export function yearlyText(value) {
  const match = /^(\d\d)-(\d\d)$/.exec(String(value));
  if (!match || Number(match[1]) < 1 || Number(match[1]) > 12) return String(value);
  return `every ${Number(match[2])} ${MONTHS[Number(match[1]) - 1]}`;
}

function rangeText(range) {
  const from = String((range && range.from) || "?").replace("T", " ");
  const to = String((range && range.to) || "?").replace("T", " ");
  return `${from} → ${to}`;
}

function partList(name, items, text, empty) {
  if (!items.length) return h("span", { class: "muted" }, empty);
  return h("ul", { class: "parts", "data-part": name }, items.map((item) => h("li", {}, text(item))));
}

// The parts of `calendar` in readable form, each list marked by its part's name.
export function partsView(calendar) {
  return fieldList([
    ["Time zone", h("span", { "data-value": "timeZone" }, String(calendar.timeZone || "—"))],
    ["Excluded dates (whole days)", partList("excludeDates", list(calendar.excludeDates), (d) => h("code", {}, String(d)), "none")],
    ["Excluded ranges (from, to exclusive)", partList("excludeRanges", list(calendar.excludeRanges), rangeText, "none")],
    ["Weekly windows", partList("weekly", list(calendar.weekly), weeklyText, "none")],
    ["Yearly dates", partList("yearly", list(calendar.yearly), yearlyText, "none")],
  ]);
}

export function listView(ctx) {
  const { api } = ctx;
  const body = h("div");
  const count = h("span", { class: "muted" });
  const el = h(
    "div",
    { class: "view" },
    h(
      "div",
      { class: "heading" },
      h("h1", {}, "Calendars ", count),
      mayWriteShared(ctx) ? h("a", { class: "button primary", href: "#/calendars/new", "data-action": "add-calendar" }, "Add calendar") : null,
    ),
    note("A job that lists a calendar in its excludeCalendars skips every fire in the periods the calendar excludes; each skip is recorded (fire_excluded)."),
    body,
  );
  ctx.every(10000, async () => {
    if (!(await serves(api, CALENDARS_PATH, CALENDARS_PATH, { limit: 1 }))) {
      fill(body, note(NOT_AVAILABLE));
      return;
    }
    const { items, more } = await allCalendars(api);
    if (!ctx.alive) return;
    count.textContent = more ? `(${items.length}, more on the server)` : `(${items.length})`;
    fill(
      body,
      table(
        [
          { label: "Calendar", cell: (c) => link(["calendars", c.calendarName], c.calendarName) },
          { label: "Time zone", cell: (c) => String(c.timeZone || "—") },
          { label: "Excludes", cell: (c) => partsSummary(c) },
          // Only when the list says it (one calendar's page always does).
          items.some((c) => Array.isArray(c.usedBy)) ? { label: "Used by", cell: (c) => String(list(c.usedBy).length) } : null,
        ].filter(Boolean),
        items,
        "No calendar yet.",
        { "data-table": "calendars" },
      ),
    );
  });
  return el;
}

export function detail(ctx) {
  const { api } = ctx;
  const name = ctx.params.calendar;
  const body = h("div");
  const users = h("div");
  const problem = h("p", { class: "error", role: "alert", "data-error": "delete", hidden: true });
  const actions = h("div", { class: "actions" });
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["calendars"], "Calendars"), " / "),
    h("div", { class: "heading" }, h("h1", {}, "Calendar ", name), actions),
    problem,
    section("What it excludes", body),
    section("Used by", users),
  );
  if (mayWriteShared(ctx)) {
    fill(
      actions,
      h("a", { class: "button", href: href(["calendars", name, "edit"]), "data-action": "edit" }, "Edit"),
      deleteButton({
        what: "calendar",
        name,
        lines: ["A calendar still listed by a job or workflow is not deleted: the server names its users."],
        remove: () => api.del(base(name)),
        problem,
        back: "#/calendars",
      }),
    );
  }
  ctx.every(10000, async () => {
    let calendar;
    try {
      calendar = await api.get(base(name));
    } catch (error) {
      if (error.status !== 404) throw error;
      fill(body, h("p", { class: "error" }, error.message));
      fill(users);
      fill(actions);
      return;
    }
    if (!ctx.alive) return;
    fill(body, partsView(calendar));
    const used = list(calendar.usedBy).map(String);
    const flows = list(calendar.usedByWorkflows).map(String);
    fill(
      users,
      used.length || flows.length
        ? h(
            "ul",
            { "data-list": "calendar-users" },
            used.map((job) => h("li", {}, "job ", link(["jobs", job], job))),
            flows.map((flow) => h("li", {}, "workflow ", link(["workflows", flow], flow))),
          )
        : note("No job or workflow you can see lists this calendar."),
    );
  });
  return el;
}

// The parts of a stored calendar as the editor's JSON (only the four parts).
function partsJson(calendar) {
  const out = {};
  for (const key of PARTS) out[key] = list(calendar && calendar[key]);
  return JSON.stringify(out, null, 2);
}

export function form(ctx) {
  const { api } = ctx;
  const editing = ctx.params.calendar || null;
  const nameInput = h("input", { name: "calendarName", autocomplete: "off", required: true, readonly: Boolean(editing) });
  const zoneInput = h("input", { name: "timeZone", autocomplete: "off", placeholder: "the scheduler's default" });
  const partsInput = h("textarea", { name: "parts", rows: 14, spellcheck: "false", class: "code" });
  const icsInput = h("input", { name: "ics", type: "file", accept: ".ics,text/calendar" });
  const general = h("p", { class: "error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, editing ? "Save" : "Add calendar");
  partsInput.value = editing ? "" : JSON.stringify(EXAMPLE, null, 2);
  const formEl = h(
    "form",
    { class: "card form", novalidate: true, "data-form": "calendar" },
    general,
    h(
      "div",
      { class: "grid" },
      field("Name", nameInput, editing ? "The name cannot change." : "Letters, digits, _ . - (the first not . or -)."),
      field("Time zone", zoneInput, "IANA name, e.g. Europe/Berlin: dates and wall times are read in it."),
      h(
        "div",
        { class: "span2" },
        field(
          "Excluded periods (JSON)",
          partsInput,
          'excludeDates: ["YYYY-MM-DD"]; excludeRanges: [{"from", "to"}] ISO 8601, to exclusive; weekly: [{"days": ["SAT"], "from": "02:00", "to": "04:00"}]; yearly: ["MM-DD"]. One part at least, unless an .ics file gives them.',
        ),
      ),
      h(
        "div",
        { class: "span2" },
        field("Import an iCalendar file (.ics)", icsInput, "Its events become excluded dates, ranges and yearly dates, added to the parts above."),
      ),
    ),
    h(
      "div",
      { class: "actions" },
      h("a", { class: "button secondary", href: editing ? href(["calendars", editing]) : "#/calendars" }, "Cancel"),
      submit,
    ),
  );
  const el = h(
    "div",
    { class: "view" },
    h("p", { class: "crumbs" }, link(["calendars"], "Calendars"), " / "),
    h("h1", {}, editing ? `Edit calendar ${editing}` : "Add a calendar"),
    mayWriteShared(ctx) ? formEl : note("Read-only: changing calendars takes the editor role on every app."),
  );

  const ready = (async () => {
    if (!editing) return;
    const stored = await api.get(base(editing));
    if (!ctx.alive) return;
    nameInput.value = String(stored.calendarName || editing);
    zoneInput.value = String(stored.timeZone || "");
    partsInput.value = partsJson(stored);
  })().catch((error) => showFieldErrors(formEl, {}, general, error.message));

  const readIcs = async () => {
    const file = icsInput.files && icsInput.files[0];
    if (!file) return undefined;
    if (file.size > ICS_MAX_BYTES) throw Object.assign(new Error("too big"), { fields: { ics: `the file is over ${ICS_MAX_BYTES / 1024} KB` } });
    return file.text();
  };

  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    await ready;
    const body = { calendarName: nameInput.value.trim() };
    const zone = zoneInput.value.trim();
    if (zone) body.timeZone = zone;
    const text = partsInput.value.trim();
    if (text) {
      let parts;
      try {
        parts = JSON.parse(text);
      } catch (error) {
        showFieldErrors(formEl, { parts: `not JSON: ${error.message}` }, general, "");
        return;
      }
      if (!parts || typeof parts !== "object" || Array.isArray(parts)) {
        showFieldErrors(formEl, { parts: "must be a JSON object of excludeDates, excludeRanges, weekly and yearly" }, general, "");
        return;
      }
      Object.assign(body, parts);
    }
    submit.disabled = true;
    try {
      const ics = await readIcs();
      if (ics !== undefined) body.ics = ics;
      if (editing) await api.put(base(editing), body);
      else await api.post("/api/calendar", body);
      toast(editing ? `Calendar ${body.calendarName} saved` : `Calendar ${body.calendarName} added`);
      location.hash = href(["calendars", body.calendarName]);
    } catch (error) {
      // The API names a part's item (`weekly[0].days`): shown with the parts' editor.
      const fields = {};
      for (const [key, problem] of Object.entries(error.fields || {})) {
        const part = PARTS.find((p) => key === p || key.startsWith(`${p}[`));
        const target = part ? "parts" : key;
        const text = key === target ? String(problem) : `${key}: ${problem}`;
        fields[target] = fields[target] ? `${fields[target]}; ${text}` : text;
      }
      showFieldErrors(formEl, fields, general, error.message);
    } finally {
      submit.disabled = false;
    }
  });
  return el;
}

// For a job's page: its calendars as links, or a note.
export function calendarLinks(names) {
  const all = list(names).map(String);
  if (!all.length) return h("span", { class: "muted" }, "none");
  return h("span", { "data-value": "excludeCalendars" }, all.map((n, i) => [i ? ", " : "", link(["calendars", n], n)]));
}
