// The client half of tests/clients/clients_test.sh: the real npm client SDKs, unchanged, each with
// its own default model name and API version, pointed at a live `rankd serve`:
//   cohere-ai CohereClient (v1, no model), CohereClientV2 (v2, rerank-v3.5),
//   ai's rerank() with @ai-sdk/cohere (v2, rerank-v3.5, its zod schema checks the answer),
//   @langchain/cohere CohereRerank (v1 through its own cohere-ai, rerank-english-v3.0),
//   @llamaindex/cohere CohereRerank (v1 through its own cohere-ai, its default
//   rerank-english-v2.0).
// Each one's ranking must be the server's own (/v1/rerank called with fetch: the same indices, the
// same scores). The Cohere SDK skips validation of answers; the answers are also parsed with its
// own serializers, validation on, so that every field its schema requires is there.
// Arguments: API base URL, API key. Exits non-zero naming the client that failed.
'use strict';
const path = require('path');

const [base, apiKey] = process.argv.slice(2);
const query = 'senior rust software engineer in berlin';
const documents = [
  'Rust backend engineer, Berlin: senior, distributed systems',
  'Barista, Lisbon: espresso, latte art',
  'Senior Go developer, Munich',
  'Junior Rust developer, Berlin',
  'Senior Rust engineer, Madrid',
];

function check(condition, message) {
  if (!condition) throw new Error(message);
}

// The server's ranking of `documents`, best first: [{index, relevance_score}].
async function serverRanking(topN) {
  const r = await fetch(`${base}/v1/rerank`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ query, documents, top_n: topN, return_documents: false }),
  });
  const text = await r.text();
  check(r.ok, `POST /v1/rerank answered ${r.status}: ${text}`);
  return JSON.parse(text).results;
}

// `ranking` ([{index, score}]) is the server's first `expected.length`.
function expectServerRanking(name, ranking, expected) {
  check(ranking.length === expected.length,
        `${name}: ${ranking.length} results, expected ${expected.length}: ${JSON.stringify(ranking)}`);
  ranking.forEach((r, i) => {
    check(r.index === expected[i].index && r.score === expected[i].relevance_score,
          `${name}: result ${i} is ${JSON.stringify(r)}, the server's is ${JSON.stringify(expected[i])}`);
  });
}

// The answer of `route` to `body`, parsed by the Cohere SDK's own serializer with validation on.
async function validateWithCohereSchema(cohereDir, route, body, schemaName) {
  const serialization = require(path.join(cohereDir, 'serialization'));
  const r = await fetch(`${base}${route}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
  });
  check(r.ok, `POST ${route} answered ${r.status}`);
  const json = await r.json();
  const parsed = serialization[schemaName].parse(json, {
    unrecognizedObjectKeys: 'passthrough', skipValidation: false,
  });
  check(parsed.ok, `${route}: cohere-ai's ${schemaName} refuses the answer: ` +
        `${JSON.stringify(parsed.errors)}: ${JSON.stringify(json)}`);
  check(parsed.value.meta && parsed.value.meta.apiVersion && parsed.value.meta.billedUnits &&
        typeof parsed.value.meta.billedUnits.searchUnits === 'number',
        `${route}: meta without api_version or billed_units.search_units: ${JSON.stringify(json)}`);
}

const clients = {
  async 'cohere-ai CohereClient (v1)'() {
    const { CohereClient } = require('cohere-ai');
    const client = new CohereClient({ token: apiKey, environment: base });
    const answer = await client.rerank({ query, documents });  // no model: Cohere's default
    expectServerRanking('CohereClient', answer.results.map((r) => ({ index: r.index, score: r.relevanceScore })),
                        await serverRanking(documents.length));
    check(answer.meta.apiVersion.version === '1', `meta: ${JSON.stringify(answer.meta)}`);
    await validateWithCohereSchema(path.dirname(require.resolve('cohere-ai')), '/v1/rerank',
                                   { query, documents }, 'RerankResponse');
  },
  async 'cohere-ai CohereClientV2 (v2)'() {
    const { CohereClientV2 } = require('cohere-ai');
    const client = new CohereClientV2({ token: apiKey, environment: base });
    const answer = await client.rerank({ model: 'rerank-v3.5', query, documents, topN: 3 });
    expectServerRanking('CohereClientV2', answer.results.map((r) => ({ index: r.index, score: r.relevanceScore })),
                        await serverRanking(3));
    check(answer.meta.apiVersion.version === '2', `meta: ${JSON.stringify(answer.meta)}`);
    check(answer.meta.billedUnits.searchUnits === 1, `meta: ${JSON.stringify(answer.meta)}`);
    await validateWithCohereSchema(path.dirname(require.resolve('cohere-ai')), '/v2/rerank',
                                   { model: 'rerank-v3.5', query, documents }, 'V2RerankResponse');
  },
  async 'ai rerank() with @ai-sdk/cohere'() {
    const { rerank } = require('ai');
    const { createCohere } = require('@ai-sdk/cohere');
    const cohere = createCohere({ baseURL: `${base}/v2`, apiKey });
    const result = await rerank({ model: cohere.reranking('rerank-v3.5'), documents, query, topN: 3 });
    expectServerRanking('ai rerank()', result.ranking.map((r) => ({ index: r.originalIndex, score: r.score })),
                        await serverRanking(3));
    check(result.rerankedDocuments[0] === documents[result.ranking[0].originalIndex],
          `rerankedDocuments: ${JSON.stringify(result.rerankedDocuments)}`);
  },
  async '@langchain/cohere CohereRerank'() {
    const { CohereRerank } = require('@langchain/cohere');
    // LangChain's way to another server: a client of its own cohere-ai, at that URL.
    const ownCohere = require.resolve('cohere-ai', { paths: [path.dirname(require.resolve('@langchain/cohere'))] });
    const { CohereClient } = require(ownCohere);
    const reranker = new CohereRerank({
      client: new CohereClient({ token: apiKey, environment: base }),
      model: 'rerank-english-v3.0',
      topN: 3,
    });
    const ranked = await reranker.rerank(documents, query);
    expectServerRanking('CohereRerank.rerank', ranked.map((r) => ({ index: r.index, score: r.relevanceScore })),
                        await serverRanking(3));  // its topN
    const { Document } = require('@langchain/core/documents');
    const kept = await reranker.compressDocuments(documents.map((d) => new Document({ pageContent: d })), query);
    const expected = await serverRanking(3);
    check(kept.length === 3 && kept.every((d, i) => d.pageContent === documents[expected[i].index] &&
                                          d.metadata.relevanceScore === expected[i].relevance_score),
          `compressDocuments: ${JSON.stringify(kept)}`);
  },
  async '@llamaindex/cohere CohereRerank'() {
    const { CohereRerank } = require('@llamaindex/cohere');
    const { TextNode } = require('@llamaindex/core/schema');
    const reranker = new CohereRerank({ apiKey, baseUrl: base, topN: 3 });  // its default model
    const nodes = documents.map((text) => ({ node: new TextNode({ text }), score: 0 }));
    const ranked = await reranker.postprocessNodes(nodes, query);
    expectServerRanking('llamaindex CohereRerank',
                        ranked.map((r) => ({ index: nodes.findIndex((n) => n.node === r.node), score: r.score })),
                        await serverRanking(3));
  },
};

async function main() {
  const failed = [];
  for (const [name, run] of Object.entries(clients)) {
    try {
      await run();
      console.log(`clients_test: ${name}: ok`);
    } catch (e) {
      failed.push(name);
      console.error(`clients_test: ${name}: FAILED: ${e && e.stack ? e.stack : e}`);
    }
  }
  if (failed.length > 0) {
    console.error(`clients_test: ${failed.length} of ${Object.keys(clients).length} clients failed: ${failed.join(', ')}`);
    process.exit(1);
  }
  console.log(`clients_test: all ${Object.keys(clients).length} clients work against ${base}`);
}

main().catch((e) => {
  console.error(`clients_test: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
