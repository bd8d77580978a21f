// A real OAuth 2.1 authorization server for the e2e tests: npm's oidc-provider (OpenID
// Certified), on loopback, configured as the MCP authorization spec has an issuer serve a
// resource server such as bermd:
//   - dynamic client registration (RFC 7591) for public clients, PKCE required;
//   - resource indicators (RFC 8707): an access token for bermd is a JWT (RFC 9068) whose
//     `aud` is the resource the client named, carrying the berm scopes it was granted;
//   - login and consent finished by the test itself (`interaction`), standing in for a user:
//     the consent grants what the client asked for, or only `grantOnly` while the test sets
//     it (a user who narrows what an app may do).
//
//   - for the resources in `opaqueResources`, opaque access tokens instead, which a resource
//     server checks by RFC 7662 introspection (as the confidential client `introspector`
//     names, { client_id, client_secret }), and which a confidential `machine` client gets by
//     the client-credentials grant and revokes (RFC 7009) without a user.
//
// startIssuer() returns { url, state: { grantOnly }, close }.

import { createRequire } from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";

const NPM = process.env.BERM_NPM_DIR ?? join(homedir(), ".cache/berm/npm22");
const require = createRequire(join(NPM, "node_modules/"));

/** The scopes bermd understands (docs/service.md, "OAuth"). */
export const BERM_SCOPES = [
  "berm:read", "berm:call", "berm:call:echo", "berm:call:notes", "berm:call:echo_echo", "berm:call:notes_list",
];

export async function startIssuer({ port, resources, opaqueResources = [], introspector, machine }) {
  const { default: Provider } = await import(require.resolve("oidc-provider"));
  const jose = await import(require.resolve("jose"));
  const keys = [];
  for (const [alg, kid] of [["RS256", "rsa-1"], ["ES256", "ec-1"]]) {
    const { privateKey } = await jose.generateKeyPair(alg, { extractable: true });
    keys.push({ ...(await jose.exportJWK(privateKey)), kid, alg, use: "sig" });
  }
  const url = `http://127.0.0.1:${port}`;
  const state = { grantOnly: null };
  const provider = new Provider(url, {
    jwks: { keys },
    // berm's scopes are the resource server's (getResourceServerInfo); listed here too, since
    // a client registering asks for them and oidc-provider admits only scopes it lists.
    scopes: ["openid", "offline_access", ...BERM_SCOPES],
    ttl: { ClientCredentials: 300 },
    findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
    clients: [introspector, machine].filter(Boolean).map((client) => ({
      ...client,
      grant_types: client === machine ? ["client_credentials"] : [],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: "client_secret_basic",
    })),
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      // Only the resource server's own client may ask; a client revokes only its own tokens.
      introspection: { enabled: true, allowedPolicy: (_ctx, client) => client.clientId === introspector?.client_id },
      revocation: { enabled: true, allowedPolicy: (_ctx, client, token) => client.clientId === token.clientId },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A client that names no resource gets no token for bermd.
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => {
          if (!resources.includes(resource)) {
            throw new Error(`unknown resource ${resource}`);
          }
          return {
            scope: BERM_SCOPES.join(" "),
            audience: resource,
            accessTokenTTL: 300,
            accessTokenFormat: opaqueResources.includes(resource) ? "opaque" : "jwt",
            jwt: { sign: { alg: "ES256" } },
          };
        },
      },
    },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    clientBasedCORS: () => true,
  });
  provider.proxy = false;
  // The SDK registers with the scope of the first challenge, and oidc-provider would then hold
  // the client to it, refusing the step-up's new scope: registrations here name no scope, so a
  // client may ask for any the issuer supports (and the user decides).
  provider.use(async (ctx, next) => {
    if (ctx.method === "POST" && ctx.path === "/reg") {
      const chunks = [];
      for await (const chunk of ctx.req) chunks.push(chunk);
      const metadata = JSON.parse(Buffer.concat(chunks).toString());
      delete metadata.scope;
      ctx.request.body = metadata;
    }
    return next();
  });
  // The user's part: log in as alice, consent to what was asked less what is withheld.
  provider.use(async (ctx, next) => {
    const uid = ctx.path.match(/^\/interaction\/([^/]+)$/)?.[1];
    if (!uid) return next();
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    if (details.prompt.name === "login") {
      return provider.interactionFinished(ctx.req, ctx.res, { login: { accountId: "alice" } }, { mergeWithLastSubmission: false });
    }
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const asked = String(details.params.scope ?? "").split(" ").filter(Boolean);
    const granted = state.grantOnly ?? asked;
    grant.addOIDCScope(granted.join(" "));
    const resource = details.params.resource;
    const refused = asked.filter((s) => s.startsWith("berm:") && !granted.includes(s));
    for (const r of Array.isArray(resource) ? resource : resource ? [resource] : []) {
      grant.addResourceScope(r, granted.filter((s) => s.startsWith("berm:")).join(" "));
      // What the user declined, so that the issuer does not ask again.
      if (refused.length) grant.rejectResourceScope(r, refused.join(" "));
    }
    if (refused.length) grant.rejectOIDCScope(refused.join(" "));
    const grantId = await grant.save();
    return provider.interactionFinished(ctx.req, ctx.res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  });
  const server = provider.listen(port, "127.0.0.1");
  await new Promise((ok) => server.once("listening", ok));
  return {
    url,
    state,
    close: () => new Promise((ok) => server.close(ok)),
  };
}

/**
 * What a browser does with an authorization URL: follows the redirects through login and
 * consent, carrying the issuer's cookies, until one goes to `redirectUri`; its `code`.
 */
export async function authorize(authorizationUrl, redirectUri) {
  const jar = new Map();
  let url = new URL(authorizationUrl);
  for (let hop = 0; hop < 20; hop++) {
    const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
    const response = await fetch(url, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const set of response.headers.getSetCookie()) {
      const [pair] = set.split(";");
      const at = pair.indexOf("=");
      jar.set(pair.slice(0, at), pair.slice(at + 1));
    }
    const location = response.headers.get("location");
    if (!location) {
      throw new Error(`the issuer answered ${response.status} without a redirect: ${await response.text()}`);
    }
    const next = new URL(location, url);
    if (next.href.startsWith(redirectUri)) {
      const error = next.searchParams.get("error");
      if (error) throw new Error(`authorization refused: ${error}: ${next.searchParams.get("error_description")}`);
      return next.searchParams.get("code");
    }
    url = next;
  }
  throw new Error("too many redirects");
}
