// The console's client of the public REST API.
//
// Credentials go only to the origin that served the page. A login (POST /api/session) gives an
// HttpOnly, SameSite=Strict session cookie that the browser sends with this page's own requests
// (credentials: "same-origin"); the password is never stored, and nothing is kept in
// sessionStorage or localStorage; an API token typed in to log in (POST /api/session {"token"})
// is sent once and forgotten like a password. Only the acting leader serves /api: on a standby
// the console says so and links to the leader's console when this replica vouches for it (its
// /health says leaderVouched); it never calls another replica's /api. The Overview reads the
// other replicas' public /health, without credentials (credentials: "omit"), and only of
// replicas this replica vouches for (its /health's `replicas`). Redirects are never followed
// (redirect: "manual").

import { Rights } from "./rights.js";

const IDENTITY = /^(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$/;
const DOCS_TTL_MS = 5 * 60 * 1000;
const REDISCOVER_MIN_MS = 1000;
const TOKEN_TEXT = /^ejc_[0-9a-f]{12}_[0-9a-f]{48}$/;

// Whether `text` has the shape of an API token (ejc_<id>_<secret>): the login says so before
// sending anything else.
export function looksLikeToken(text) {
  return TOKEN_TEXT.test(text);
}

export function validIdentity(value) {
  return typeof value === "string" && IDENTITY.test(value);
}

export class ApiError extends Error {
  constructor(status, body, fallback) {
    const message =
      body && typeof body.error === "string" ? body.error : fallback || `HTTP status ${status}`;
    super(message);
    this.status = status;
    this.type = body && typeof body.type === "string" ? body.type : "";
    this.fields = body && body.fields && typeof body.fields === "object" ? body.fields : {};
  }
}

function queryString(query) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

// "/api/job/{jobName}/runs" -> "/api/job/{}/runs", so templates compare whatever they name.
function template(path) {
  return path.replace(/\{[^}]*\}/g, "{}");
}

// Events: "leader" (this replica's role or the leader it names changed), "role" (identify
// changed), "unauthorized" (the session ended).
export class Api extends EventTarget {
  constructor() {
    super();
    this.user = "";
    this.identify = null;
    this.authOff = false;
    this.session = null; // {user, role, expiresAt, principal, rights} while logged in
    this.principal = ""; // who the session acts as: user:NAME, token:ID ("" when unknown)
    this.rights = Rights.fromSession(null, false);
    this.checked = false; // whether /api/session was asked since the page loaded
    this.standby = false; // this replica does not serve the API now
    this.leader = null; // the acting leader's identity, when known
    this.leaderConsole = null; // the leader's console URL, only when this replica vouches for it
    this.own = null; // this replica's identity
    this.ownHealth = null;
    this.vouched = []; // identities of the replicas this replica vouches for (its own included)
    this._docs = null;
    this._docsAt = 0;
    this._discovery = null;
    this._discoveredAt = 0;
  }

  get loggedIn() {
    return this.authOff || Boolean(this.session);
  }

  get canWrite() {
    return this.identify === "root";
  }

  // Whether the principal holds at least `role` on `app` (see rights.js; the API decides).
  may(role, app) {
    return this.rights.may(role, app);
  }

  // Read this replica's /health (with the session cookie, so its details when logged in):
  // whether it leads, which leader it names and vouches for, which replicas it vouches for.
  async discover() {
    const res = await fetch("/health", {
      credentials: "same-origin",
      cache: "no-store",
      redirect: "manual",
    });
    const body = await res.json();
    this._discoveredAt = Date.now();
    this.ownHealth = body;
    this.own = validIdentity(body.identity) ? body.identity : null;
    const standby = body.role !== "leader";
    const leader = standby ? (validIdentity(body.leader) && body.leader !== this.own ? body.leader : null) : this.own;
    const vouched = !standby || body.leaderVouched === true;
    const leaderConsole = standby && leader && vouched ? `${location.protocol}//${leader}/` : null;
    this.vouched = (Array.isArray(body.replicas) ? body.replicas : []).filter(validIdentity);
    const changed =
      standby !== this.standby || leader !== this.leader || leaderConsole !== this.leaderConsole;
    this.standby = standby;
    this.leader = leader;
    this.leaderConsole = leaderConsole;
    if (changed) {
      this._docs = null;
      this.dispatchEvent(new Event("leader"));
    }
    return body;
  }

  // discover(), shared by concurrent callers and at most once a second.
  async rediscover() {
    if (this._discovery) return this._discovery;
    const wait = Math.max(0, this._discoveredAt + REDISCOVER_MIN_MS - Date.now());
    this._discovery = (async () => {
      if (wait) await new Promise((resolve) => setTimeout(resolve, wait));
      try {
        await this.discover();
      } catch {
        // Unreachable: keep what was known; the next poll asks again.
      } finally {
        this._discovery = null;
      }
    })();
    return this._discovery;
  }

  // The session this page's cookie holds, if any (null: not logged in). Throws ApiError on a
  // standby (the API is the leader's).
  async whoami() {
    try {
      const found = await this.request("GET", "/api/session", { retry: false, quiet: true });
      this._setSession(found);
    } catch (error) {
      if (error.status !== 401) throw error;
      this._setSession(null);
    } finally {
      this.checked = true;
    }
    return this.identify;
  }

  _setSession(found) {
    const valid = Boolean(found && typeof found.role === "string" && found.role);
    // Auth off: a role with no session and nobody named (the anonymous cluster-admin).
    const anonymous = !found || !found.principal || found.principal === "anonymous";
    this.authOff = Boolean(valid && !found.expiresAt && !found.user && anonymous);
    this.session = valid && !this.authOff ? found : null;
    this.user = this.session ? String(found.user || "") : "";
    this.principal = this.session && typeof found.principal === "string" ? found.principal : "";
    const before = this.rights.key();
    this.rights = Rights.fromSession(valid ? found : null, this.authOff);
    const identify = valid ? found.role : null;
    if (identify !== this.identify || this.rights.key() !== before) {
      this.identify = identify;
      this.dispatchEvent(new Event("role"));
    }
  }

  // Who is logged in, for the header: the token (token:ID) or the user.
  get who() {
    if (this.principal.startsWith("token:")) return this.principal;
    return this.user || this.principal || "?";
  }

  // Log in on this replica (the leader): true, or false for wrong credentials. Throws ApiError
  // for anything else (a standby, too many failures, ...).
  async login(user, password) {
    return this._login({ user, password });
  }

  // Log in with an API token (ejc_<id>_<secret>): the session acts as the token, with its role
  // on its app. True, or false for a wrong, revoked or expired token.
  async loginToken(token) {
    return this._login({ token });
  }

  async _login(body) {
    try {
      const found = await this.request("POST", "/api/session", { body, retry: false, quiet: true });
      // The principal and rights come with the login's answer; a server that leaves them out
      // says them when asked.
      if (found && found.rights && typeof found.rights === "object") this._setSession(found);
      else await this.whoami();
      this.checked = true;
      return this.loggedIn;
    } catch (error) {
      if (error.status === 401) return false;
      throw error;
    }
  }

  // End the session everywhere (the leader revokes it), and forget it here whatever happens.
  // Returns why the server could not end it (then the cookie stays until it expires), or "".
  async logout() {
    let problem = "";
    try {
      await this.request("DELETE", "/api/session", { retry: false, quiet: true });
    } catch (error) {
      problem = `The session could not be ended on the server (${error.message}); it expires by itself.`;
    }
    this._setSession(null);
    return problem;
  }

  async request(method, path, { query, body, retry = true, quiet = false } = {}) {
    if (this.standby) await this.rediscover();
    if (this.standby) throw this._standbyError();
    const init = {
      method,
      credentials: "same-origin",
      cache: "no-store",
      redirect: "manual",
      headers: {},
    };
    if (body !== undefined) {
      init.headers = { "Content-Type": "application/json" };
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path + queryString(query), init);
    } catch {
      await this.rediscover();
      if (retry && method === "GET") return this.request(method, path, { query, retry: false, quiet });
      throw new ApiError(0, null, "this replica could not be reached; try again");
    }
    if (res.type === "opaqueredirect") {
      // This replica became a standby: nothing was done. It is never followed.
      await this.rediscover();
      throw this._standbyError();
    }
    const identify = res.headers.get("identify");
    if (identify && identify !== this.identify) {
      this.identify = identify;
      this.dispatchEvent(new Event("role"));
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (res.ok) return data;
    const error = new ApiError(res.status, data);
    if (res.status === 503 && error.type === "NotLeader") {
      await this.rediscover();
      if (retry && !this.standby) return this.request(method, path, { query, body, retry: false, quiet });
      throw this.standby ? this._standbyError() : error;
    }
    if (res.status === 401 && !quiet && !this.authOff) {
      this._setSession(null);
      this.dispatchEvent(new Event("unauthorized"));
    }
    throw error;
  }

  _standbyError() {
    const leader = this.leaderConsole ? `; the leader is ${this.leader}` : "";
    return new ApiError(503, { type: "NotLeader" }, `this replica is a standby${leader}`);
  }

  get(path, query) {
    return this.request("GET", path, { query });
  }

  post(path, body) {
    return this.request("POST", path, { body });
  }

  put(path, body) {
    return this.request("PUT", path, { body });
  }

  del(path) {
    return this.request("DELETE", path);
  }

  // What this leader's OpenAPI document says it serves: endpoints and job fields.
  async docs() {
    if (this._docs && Date.now() - this._docsAt < DOCS_TTL_MS) return this._docs;
    const found = { paths: new Set(), jobFields: new Set(), known: false };
    try {
      const doc = await this.get("/api/openapi.json");
      for (const [path, ops] of Object.entries((doc && doc.paths) || {})) {
        for (const method of Object.keys(ops || {})) {
          found.paths.add(`${method.toUpperCase()} ${template(path)}`);
        }
      }
      const job = doc && doc.components && doc.components.schemas && doc.components.schemas.Job;
      for (const name of Object.keys((job && job.properties) || {})) found.jobFields.add(name);
      found.known = true;
    } catch {
      if (this._docs) return this._docs;
    }
    this._docs = found;
    this._docsAt = Date.now();
    return found;
  }

  // Whether the leader serves `method path` (path as in the OpenAPI document).
  async has(method, path) {
    const docs = await this.docs();
    return docs.paths.has(`${method} ${template(path)}`);
  }

  // A replica's /health: this one's with the session cookie (its details), another one's
  // public part without credentials, and only of a replica this one vouches for.
  async healthOf(identity) {
    if (!validIdentity(identity)) return { status: 0, body: null };
    const own = identity === this.own;
    if (!own && !this.vouched.includes(identity)) return { status: 0, body: null };
    const url = own ? "/health" : `${location.protocol}//${identity}/health`;
    try {
      const res = await fetch(url, {
        credentials: own ? "same-origin" : "omit",
        cache: "no-store",
        redirect: "manual",
      });
      return { status: res.status, body: await res.json() };
    } catch {
      return { status: 0, body: null };
    }
  }
}

export function segment(name) {
  return encodeURIComponent(String(name));
}
