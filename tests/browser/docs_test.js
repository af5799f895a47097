// The page half of tests/browser/docs_test.sh: drives headless chromium through Swagger UI on
// rankd's GET /docs. Arguments: API base URL, readiness URL, API key, screenshot path.
// Exits non-zero, saying why, on any failure (the browser not starting included).
'use strict';
const { chromium } = require('playwright-core');

const [base, readyUrl, apiKey, shot] = process.argv.slice(2);
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

    // Both routes, as Swagger UI lists them from /openapi.json.
    const route = (path) => page.locator(`.opblock-post:has(.opblock-summary-path[data-path="${path}"])`);
    for (const path of ['/v1/rerank', '/rerank']) {
      await route(path).waitFor({ timeout: 30000 });
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
    console.log(`docs_test: /docs lists both routes; Try it out on /v1/rerank answered 200, scores ${scores.join(', ')}; screenshot ${shot}`);
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.error(`docs_test: ${e.stack || e}`);
  process.exit(1);
});
