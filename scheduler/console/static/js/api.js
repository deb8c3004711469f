// The console's client of the public REST API.
//
// Every replica serves the console, but only the leader serves /api, and a browser drops the
// Authorization header when it follows a redirect to another origin. So the console asks the
// replica that served the page for /health (whose public part names the leader) and calls the
// leader's /api directly: relative URLs when this replica leads, http://<leader> otherwise. The
// leader answers CORS for the origins of the replicas in the election. Requests never carry
// cookies or browser-saved credentials (credentials: "omit"); the user's credentials are kept in
// sessionStorage for this tab and sent as an Authorization header.

const TOKEN_KEY = "ejcloud.console.authorization";
const USER_KEY = "ejcloud.console.user";
const IDENTITY = /^(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$/;
const DOCS_TTL_MS = 5 * 60 * 1000;
const REDISCOVER_MIN_MS = 1000;

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

function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return `Basic ${btoa(binary)}`;
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

// Events: "leader" (the API's address changed), "role" (identify changed), "unauthorized".
export class Api extends EventTarget {
  constructor() {
    super();
    this.token = sessionStorage.getItem(TOKEN_KEY);
    this.user = sessionStorage.getItem(USER_KEY) || "";
    this.identify = null;
    this.authOff = false;
    this.base = null; // "" when this replica leads, "http://host:port" of the leader, null: none known
    this.leader = null;
    this.own = null; // this replica's identity
    this.ownHealth = null;
    this.problem = ""; // why the leader cannot be used from this page, if it cannot
    this._docs = null;
    this._docsAt = 0;
    this._discovery = null;
    this._discoveredAt = 0;
  }

  get loggedIn() {
    return this.authOff || Boolean(this.token);
  }

  get canWrite() {
    return this.identify === "root";
  }

  _headers() {
    return this.token && !this.authOff ? { Authorization: this.token } : {};
  }

  // Read this replica's /health; learn who leads and whether credentials are needed at all.
  async discover() {
    const res = await fetch("/health", {
      credentials: "omit",
      cache: "no-store",
      headers: this._headers(),
    });
    const body = await res.json();
    this._discoveredAt = Date.now();
    this.ownHealth = body;
    this.own = typeof body.identity === "string" ? body.identity : null;
    // Without credentials the public part has no pid: seeing it means auth is off.
    if (!this.token && "pid" in body) this.authOff = true;
    let base = null;
    let leader = null;
    if (body.role === "leader") {
      base = "";
      leader = this.own;
    } else if (validIdentity(body.leader) && body.leader !== this.own) {
      // Another replica holds the election; use it only once it acts (its own /health says
      // "leader"): while its term starts, its /api would refuse every call with 503.
      if (await this._acts(body.leader)) {
        base = `http://${body.leader}`;
        leader = body.leader;
      }
    }
    // body.leader === this.own with role "standby": this replica won the election and is
    // starting its term; no leader acts yet, so no call is made until it does.
    this.problem = "";
    if (base && this.own && location.host.toLowerCase() !== this.own.toLowerCase()) {
      this.problem =
        `This page was opened as ${location.host}, which is not a replica's address ` +
        `(${this.own}); the leader only answers pages opened at a replica's address.`;
    }
    const changed = base !== this.base || leader !== this.leader;
    this.base = base;
    this.leader = leader;
    if (changed) {
      this._docs = null;
      this.dispatchEvent(new Event("leader"));
    }
    return body;
  }

  // Whether the replica `identity` says it is the acting leader (public /health, no credentials).
  async _acts(identity) {
    try {
      const res = await fetch(`http://${identity}/health`, {
        credentials: "omit",
        cache: "no-store",
      });
      const body = await res.json();
      return body.role === "leader";
    } catch {
      return false;
    }
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
        this.base = null;
      } finally {
        this._discovery = null;
      }
    })();
    return this._discovery;
  }

  async login(user, password) {
    const token = basic(user, password);
    const res = await fetch("/health", {
      credentials: "omit",
      cache: "no-store",
      headers: { Authorization: token },
    });
    const body = await res.json().catch(() => null);
    // /health shows its details (pid, term, ...) only to credentials the API accepts.
    if (!body || !("pid" in body)) return false;
    this.token = token;
    this.user = user;
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.setItem(USER_KEY, user);
    await this.whoami();
    return true;
  }

  logout() {
    this.token = null;
    this.user = "";
    this.identify = null;
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(USER_KEY);
    this.dispatchEvent(new Event("role"));
  }

  // The role the API gives these credentials (its identify header): "root" or "guest".
  async whoami() {
    await this.get("/api/job/tasks/ready");
    return this.identify;
  }

  async request(method, path, { query, body, retry = true } = {}) {
    if (this.base === null) await this.rediscover();
    if (this.base === null) {
      throw new ApiError(503, null, "no acting leader is known; retrying");
    }
    const init = {
      method,
      credentials: "omit",
      cache: "no-store",
      redirect: "manual",
      headers: this._headers(),
    };
    if (body !== undefined) {
      init.headers = { ...init.headers, "Content-Type": "application/json" };
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(this.base + path + queryString(query), init);
    } catch {
      // Unreachable (the leader stopped, or the browser refused the call): find it again.
      await this.rediscover();
      if (retry && method === "GET") return this.request(method, path, { query, retry: false });
      throw new ApiError(0, null, this.problem || `the leader ${this.leader || ""} could not be reached; try again`);
    }
    if (res.type === "opaqueredirect") {
      // A standby redirected: the leader moved and nothing was done. Ask again there.
      await this.rediscover();
      if (retry) return this.request(method, path, { query, body, retry: false });
      throw new ApiError(503, null, "the leader moved; try again");
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
    if (res.status === 503 && error.type === "NotLeader" && retry) {
      // Refused before anything was done: the replica is not (or no longer) the acting leader.
      await this.rediscover();
      return this.request(method, path, { query, body, retry: false });
    }
    if (res.status === 401 && !this.authOff) {
      this.logout();
      this.dispatchEvent(new Event("unauthorized"));
    }
    throw error;
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

  // Another replica's /health, with credentials so it shows its details.
  async healthOf(identity) {
    if (!validIdentity(identity)) return { status: 0, body: null };
    const url = identity === this.own ? "/health" : `http://${identity}/health`;
    try {
      const res = await fetch(url, { credentials: "omit", cache: "no-store", headers: this._headers() });
      return { status: res.status, body: await res.json() };
    } catch {
      return { status: 0, body: null };
    }
  }
}

export function segment(name) {
  return encodeURIComponent(String(name));
}
