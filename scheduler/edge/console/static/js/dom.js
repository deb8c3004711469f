// DOM helpers and formatting. Every value from the server goes into the page as a text node or
// an attribute value, never as HTML.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "value") el.value = value;
    else if (key === "checked") el.checked = Boolean(value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// A hash link; each segment is encoded, so any name stays one segment.
export function href(segments, query) {
  const path = segments.map((s) => encodeURIComponent(String(s))).join("/");
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const qs = params.toString();
  return `#/${path}${qs ? `?${qs}` : ""}`;
}

export function link(segments, text, query, attrs) {
  return h("a", { href: href(segments, query), ...(attrs || {}) }, text);
}

// --- times -----------------------------------------------------------------------------------

// A Date from an ISO 8601 string or epoch seconds; null for anything else.
export function toDate(value) {
  if (value === null || value === undefined || value === "") return null;
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  return Number.isNaN(date.getTime()) ? null : date;
}

const pad = (n, width = 2) => String(n).padStart(width, "0");

export function localTime(date, ms = false) {
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}` +
    (ms ? `.${pad(date.getMilliseconds(), 3)}` : "")
  );
}

export function relative(date, now = Date.now()) {
  const seconds = Math.round((date.getTime() - now) / 1000);
  const size = Math.abs(seconds);
  if (size === 0) return "just now"; // not "in 0 s" for what happened a moment ago
  let text;
  if (size < 60) text = `${size} s`;
  else if (size < 3600) text = `${Math.round(size / 60)} min`;
  else if (size < 86400 * 2) text = `${Math.round(size / 3600)} h`;
  else text = `${Math.round(size / 86400)} d`;
  return seconds >= 0 ? `in ${text}` : `${text} ago`;
}

// <time> in local time with the relative time after it; "—" when there is no time.
export function timeEl(value, { withRelative = true, ms = false } = {}) {
  const date = toDate(value);
  if (!date) return h("span", { class: "muted" }, "—");
  return h(
    "time",
    { datetime: date.toISOString(), title: date.toISOString() },
    localTime(date, ms),
    withRelative ? h("span", { class: "muted rel" }, ` (${relative(date)})`) : null,
  );
}

// A fire time as the server wrote it (ISO 8601 in the job's offset), shown in that offset.
export function fireTimeEl(iso) {
  const match = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:?\d\d)?$/.exec(String(iso));
  const date = toDate(iso);
  if (!match || !date) return h("span", {}, String(iso));
  const offset = match[3] === "Z" || !match[3] ? "UTC" : match[3];
  return h(
    "time",
    { datetime: date.toISOString(), title: `${date.toISOString()} (UTC)` },
    `${match[1]} ${match[2]} ${offset}`,
    h("span", { class: "muted rel" }, ` (${relative(date)})`),
  );
}

export function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

// --- building blocks -------------------------------------------------------------------------

export function badge(text, kind = "muted") {
  return h("span", { class: `badge ${kind}` }, text);
}

// columns: [{label, cell: (row) => node or text, class}]
export function table(columns, rows, emptyText, attrs) {
  if (!rows.length) return h("p", { class: "muted empty" }, emptyText);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      attrs || {},
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.class }, c.label)))),
      h(
        "tbody",
        {},
        rows.map((row) =>
          h("tr", {}, columns.map((c) => h("td", { class: c.class, "data-label": c.label }, c.cell(row)))),
        ),
      ),
    ),
  );
}

export function fieldList(pairs) {
  return h(
    "dl",
    { class: "fields" },
    pairs.map(([label, value]) => [h("dt", {}, label), h("dd", {}, value)]),
  );
}

export function section(title, ...children) {
  return h("section", { class: "card" }, h("h2", {}, title), ...children);
}

export function note(text, kind = "note") {
  return h("p", { class: kind }, text);
}

export function button(text, onclick, attrs) {
  return h("button", { type: "button", onclick, ...(attrs || {}) }, text);
}

// Buttons are disabled while their action runs, so a double click sends one request; a failed
// action shows the API's message.
export function actionButton(text, action, attrs) {
  const el = button(text, null, attrs);
  el.addEventListener("click", async () => {
    el.disabled = true;
    try {
      await action();
    } catch (error) {
      toast(error.message || String(error), "bad");
    } finally {
      el.disabled = false;
    }
  });
  return el;
}

// A "Delete" button that asks first (`what`: "calendar", "pool"; `lines`: what the dialog says),
// then runs `remove`; a refusal (a 409 naming what still uses it) shows in `problem`, a deletion
// toasts and goes to `back` (a hash).
export function deleteButton({ what, name, lines, remove, problem, back }) {
  return actionButton(
    "Delete",
    async () => {
      const ok = await confirmDialog({
        title: `Delete ${what} ${name}?`,
        lines,
        confirmText: `Delete ${what}`,
        danger: true,
      });
      if (!ok) return;
      problem.hidden = true;
      try {
        await remove();
      } catch (error) {
        problem.textContent = error.message;
        problem.hidden = false;
        throw error;
      }
      toast(`${what[0].toUpperCase()}${what.slice(1)} ${name} deleted`);
      location.hash = back;
    },
    { class: "danger", "data-action": "delete" },
  );
}

export function toast(text, kind = "ok") {
  const box = document.getElementById("toasts");
  const item = h("div", { class: `toast ${kind}`, role: kind === "bad" ? "alert" : "status" }, text);
  box.append(item);
  setTimeout(() => item.remove(), kind === "bad" ? 9000 : 5000);
}

// A modal confirmation: resolves true when the user confirms.
export function confirmDialog({ title, lines, confirmText = "Confirm", danger = false }) {
  return new Promise((resolve) => {
    const dialog = h(
      "dialog",
      { class: "confirm", "aria-label": title },
      h("h2", {}, title),
      (lines || []).map((line) => h("p", {}, line)),
    );
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      h(
        "div",
        { class: "actions" },
        button("Cancel", () => done(false), { class: "secondary", "data-action": "cancel" }),
        button(confirmText, () => done(true), {
          class: danger ? "danger" : "primary",
          "data-action": "confirm",
        }),
      ),
    );
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      done(false);
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

// --- forms -----------------------------------------------------------------------------------

// One labelled input with a slot for the API's message about it (`data-error-for`).
// Editing a field clears the API's message about it.
function clearOnInput(box) {
  const clear = () => {
    box.classList.remove("invalid");
    const slot = box.querySelector(".field-error");
    if (slot) slot.textContent = "";
  };
  box.addEventListener("input", clear);
  box.addEventListener("change", clear);
  return box;
}

export function field(label, control, help) {
  const name = control.getAttribute("name");
  const id = `f-${name}`;
  control.id = id;
  return clearOnInput(h(
    "div",
    { class: "field", "data-field": name },
    h("label", { for: id }, label),
    control,
    help ? h("small", { class: "help" }, help) : null,
    h("div", { class: "field-error", "data-error-for": name, role: "alert" }),
  ));
}

export function checkboxField(label, control, help) {
  const name = control.getAttribute("name");
  control.id = `f-${name}`;
  return clearOnInput(h(
    "div",
    { class: "field check", "data-field": name },
    h("label", { for: control.id }, control, ` ${label}`),
    help ? h("small", { class: "help" }, help) : null,
    h("div", { class: "field-error", "data-error-for": name, role: "alert" }),
  ));
}

// Shows the API's `fields` next to the inputs they name; what names no input goes to `general`.
export function showFieldErrors(form, fields, general, message) {
  for (const slot of form.querySelectorAll(".field-error")) slot.textContent = "";
  for (const box of form.querySelectorAll(".field.invalid")) box.classList.remove("invalid");
  const unplaced = [];
  for (const [name, problem] of Object.entries(fields || {})) {
    const slot = [...form.querySelectorAll(".field-error")].find((s) => s.dataset.errorFor === name);
    const box = slot ? slot.closest(".field") : null;
    if (slot && box && !box.hidden) {
      slot.textContent = String(problem);
      box.classList.add("invalid");
    } else {
      unplaced.push(`${name}: ${problem}`);
    }
  }
  const placed = Object.keys(fields || {}).length - unplaced.length;
  const summary = placed && !unplaced.length ? "Not saved: see the fields marked below." : message;
  const text = [summary, ...unplaced].filter(Boolean).join(" — ");
  general.textContent = text;
  general.hidden = !text;
  const first = form.querySelector(".field.invalid input, .field.invalid select, .field.invalid textarea");
  if (first) first.focus();
}

// A number as typed: a number when it is one, the text otherwise (the API names the problem).
export function numberOrText(text) {
  const trimmed = text.trim();
  if (trimmed === "") return undefined;
  const value = Number(trimmed);
  return Number.isFinite(value) ? value : trimmed;
}

export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
