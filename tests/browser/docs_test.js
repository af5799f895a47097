// The page half of tests/browser/docs_test.sh: drives headless chromium through Swagger UI on
// rankd's GET /docs, then calls the API from a browser app on another origin (a CORS preflight:
// allowed for server.cors_allow_origins' origin, refused for another). Arguments: API base URL,
// readiness URL, API key, screenshot path, the allowed origin, a refused one.
// Exits non-zero, saying why, on any failure (the browser not starting included).
'use strict';
const { chromium } = require('playwright-core');

const [base, readyUrl, apiKey, shot, allowedOrigin, refusedOrigin] = process.argv.slice(2);
const request = {
  query: 'rust engineer in berlin',
  documents: ['Barista, Lisbon', 'Rust developer, Berlin', 'Go developer, Munich'],
  top_n: 3,
};

async function waitReady() {
  for (let i = 0; i < 600; ++i) {
    try {
      if ((await fetch(readyUrl)).ok) return;
    } catch (e) { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${readyUrl} never answered 200`);
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function main() {
  await waitReady();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--no-sandbox', '--disable-dev-shm-usage'],  // root in CI containers
  });
  try {
    const page = await browser.newPage({ viewport: { width: 900, height: 800 } });
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    const docs = await page.goto(`${base}/docs`);
    check(docs.status() === 200, `GET /docs answered ${docs.status()}: ${await docs.text()}`);

    // Every route, as Swagger UI lists them from /openapi.json.
    const route = (path, method = 'post') =>
      page.locator(`.opblock-${method}:has(.opblock-summary-path[data-path="${path}"])`);
    for (const path of ['/v1/rerank', '/v2/rerank', '/rerank', '/tokenize']) {
      await route(path).waitFor({ timeout: 30000 });
    }
    for (const path of ['/v1/models', '/info', '/health']) {
      await route(path, 'get').waitFor({ timeout: 30000 });
    }

    // The API key, through the Authorize dialog (the Bearer scheme of the document).
    await page.click('.auth-wrapper .btn.authorize');
    await page.fill('.auth-container input', apiKey);
    await page.click('.auth-btn-wrapper .btn.modal-btn.authorize');
    await page.click('.auth-btn-wrapper .btn-done');

    // Try it out on POST /v1/rerank.
    const op = route('/v1/rerank');
    await op.locator('.opblock-summary').first().click();
    await op.locator('.try-out__btn').click();
    await op.locator('textarea.body-param__text').fill(JSON.stringify(request, null, 2));
    await op.locator('.execute').click();
    const live = op.locator('.live-responses-table .response');
    await live.waitFor({ timeout: 60000 });
    const status = (await live.locator('.response-col_status').first().innerText()).trim();
    const bodyText = await live.locator('.response-col_description pre.microlight').first().innerText();
    check(status === '200', `the call answered ${status}: ${bodyText}`);
    const body = JSON.parse(bodyText);
    const scores = body.results.map((r) => r.relevance_score);
    check(scores.length === request.documents.length, `results: ${bodyText}`);
    check(scores.every((s) => typeof s === 'number' && s >= 0 && s <= 1), `scores: ${scores}`);
    check(scores.every((s, i) => i === 0 || scores[i - 1] >= s), `not sorted best first: ${scores}`);
    check(pageErrors.length === 0, `errors in the page: ${pageErrors.join('; ')}`);

    // From the title (both routes listed below it) to the answer.
    const top = (await page.locator('.information-container').boundingBox()).y;
    const answer = await op.locator('.live-responses-table').boundingBox();
    await page.screenshot({
      path: shot,
      fullPage: true,
      clip: { x: 0, y: top, width: 900, height: answer.y + answer.height - top },
    });
    console.log(`docs_test: /docs lists every route; Try it out on /v1/rerank answered 200, scores ${scores.join(', ')}; screenshot ${shot}`);

    // A browser app on another origin calls POST /v2/rerank with a key and JSON: a request that
    // is not "simple", so chromium sends a CORS preflight (OPTIONS) first. The apps' pages are
    // made up here (page.route); their calls reach rankd.
    const call = async (origin) => {
      // A page on a public origin that calls a loopback server needs the user's permission
      // (chromium's Local Network Access prompt): granted, as a user of the app would, to both, so
      // that what refuses the second is CORS.
      const context = await browser.newContext();
      await context.grantPermissions(['local-network-access'], { origin });
      const app = await context.newPage();
      const console = [];  // chromium says there why it refused a call
      app.on('console', (m) => console.push(m.text()));
      await app.route(`${origin}/**`, (r) => r.fulfill({ status: 200, contentType: 'text/html', body: '<p>app</p>' }));
      await app.goto(`${origin}/app.html`);
      // With routes on, chromium's requests go through the interception, which answers CORS
      // preflights itself: off again, so that the preflight reaches rankd.
      await app.unrouteAll();
      const result = await app.evaluate(async ([url, key]) => {
        try {
          const r = await fetch(`${url}/v2/rerank`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}`, 'X-Request-Id': 'browser-app-1' },
            body: JSON.stringify({ model: 'rerank-v3.5', query: 'rust engineer in berlin', documents: ['Barista, Lisbon', 'Rust developer, Berlin'] }),
          });
          return { status: r.status, id: r.headers.get('X-Request-Id'), body: await r.json() };
        } catch (e) {
          return { error: String(e) };  // what a refused preflight looks like to the app
        }
      }, [base, apiKey]);
      await context.close();
      return { ...result, console };
    };
    const allowed = await call(allowedOrigin);
    check(allowed.status === 200, `the call from ${allowedOrigin}: ${JSON.stringify(allowed)}`);
    check(allowed.id === 'browser-app-1', `X-Request-Id not readable across origins: ${JSON.stringify(allowed)}`);
    check(allowed.body.results.length === 2 && allowed.body.meta.api_version.version === '2',
          `the answer: ${JSON.stringify(allowed.body)}`);
    const refused = await call(refusedOrigin);
    check(refused.error !== undefined, `the call from ${refusedOrigin} was not refused: ${JSON.stringify(refused)}`);
    // The server saw both preflights: one answered 204, one 403.
    const metrics = await (await fetch(readyUrl.replace(/\/readyz$/, '/metrics'))).text();
    for (const code of ['204', '403']) {
      check(metrics.includes(`rankd_http_requests_total{route="OPTIONS",code="${code}"} 1`),
            `no preflight answered ${code}: ${metrics.split('\n').filter((l) => l.includes('rankd_http_requests_total')).join('; ')}`);
    }
    console.log(`docs_test: CORS: ${allowedOrigin}'s call answered 200 after its preflight; ${refusedOrigin}'s was refused (${refused.error})`);
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.error(`docs_test: ${e.stack || e}`);
  process.exit(1);
});
