// End-to-end: the built page (dist/, release build) in real Chromium against the CLI.
// Opens a link, checks the page's exact figures against `vramfit plan --link ... --json`, moves a
// slider, applies a fix, reopens the updated link, and feeds script payloads through the link.
// Run by scripts/test (`node --test tests/e2e/page.test.mjs`); needs VRAMFIT_BIN (the CLI).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { ROOT, serveDist, launchChromium, waitForCharts } from './harness.mjs';

const BIN = process.env.VRAMFIT_BIN || path.join(ROOT, 'target', 'debug', 'vramfit');
let server;
let browser;

before(async () => {
  server = await serveDist();
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** `vramfit plan --link <query> --json`, parsed. */
function cliPlan(query) {
  const out = execFileSync(BIN, ['plan', '--link', query, '--json'], { encoding: 'utf8' });
  return JSON.parse(out);
}

/**
 * The text of the first `selector` once it matches `re` (the page redraws after an input event,
 * not during it), or as it stands after 5 s, for the caller's assertion to report.
 */
async function textWhenMatching(page, selector, re) {
  await page
    .waitForFunction(([s, src]) => new RegExp(src).test(document.querySelector(s)?.textContent ?? ''), [selector, re.source], {
      timeout: 5000,
    })
    .catch(() => {});
  return page.locator(selector).first().textContent();
}

/**
 * The address bar's query once it has caught up with the page (the live link follows the state
 * when it has rested for 200 ms; the share box holds the link of the state now).
 */
async function settledSearch(page) {
  await page
    .waitForFunction(() => location.href.split('#')[0] === document.querySelector('#share-url')?.value, null, { timeout: 5000 })
    .catch(() => {});
  return page.evaluate(() => location.search);
}

/** The exact figures the page exposes on #exact, and its fixes once they are computed. */
async function pageFigures(page) {
  await page.waitForSelector('[data-state=ready]', { state: 'attached', timeout: 20000 });
  await settledSearch(page);
  return page.evaluate(() => {
    const d = document.querySelector('#exact').dataset;
    const fixes = document.querySelector('ol.fixes');
    return {
      data: { ...d },
      fixesNeeded: fixes ? fixes.dataset.needed.split(',') : [],
      fixTitles: [...document.querySelectorAll('ol.fixes .fix-title')].map((e) => e.textContent),
      params: document.querySelector('.param-count').textContent,
      verdict: document.querySelector('.verdict-title').textContent,
      search: location.search,
    };
  });
}

/** Every figure the page shows equals the CLI's for the page's own link, byte for byte. */
function assertAgrees(fig, json) {
  const d = fig.data;
  const card = json.cards[0];
  const pairs = [
    ['params', json.params.printed],
    ['tokens', json.tokens_per_iter],
    ['trainAllocated', json.train.peak_allocated_bytes],
    ['trainReserved', json.train.peak_reserved_bytes],
    ['trainSmi', json.train.nvidia_smi_bytes],
    ['evalAllocated', json.eval.peak_allocated_bytes],
    ['evalSmi', json.eval.nvidia_smi_bytes],
    ['firstIterAllocated', json.first_iter.peak_allocated_bytes],
    ['evalAtStartAllocated', json.eval_at_start.peak_allocated_bytes],
    ['needed', card.needed_bytes],
    ['available', card.available_bytes],
    ['headroom', card.headroom_bytes],
    ['fits', card.fits],
    ['worstWindow', card.worst_window],
    ['largestMicroBatch', json.largest_micro_batch],
  ];
  for (const [key, want] of pairs) {
    assert.equal(d[key], String(want), `${key}: page ${d[key]} vs CLI ${want}`);
  }
  assert.deepEqual(fig.fixesNeeded, json.fixes.map((f) => String(f.needed_bytes)));
  assert.deepEqual(fig.fixTitles, json.fixes.map((f) => f.title));
  if (card.bf16_unsupported) {
    assert.ok(fig.verdict.startsWith('Not planned: '), fig.verdict);
  } else {
    assert.equal(fig.verdict, card.fits ? 'Fits' : 'Does not fit');
  }
}

test('a link, a slider, a fix and the reopened link agree with vramfit plan --json', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // GPT-2 124M at micro-batch 64 on a 12 GB card with a desktop's 300 MiB: does not fit.
  const link = 'v=1&L=12&H=12&C=768&T=1024&B=64&GA=8&gpu=rtx-4070&other=300';
  await page.goto(server.url + '?' + link);
  await waitForCharts(page);
  let fig = await pageFigures(page);
  assert.equal(fig.verdict, 'Does not fit');
  // The page rewrote the link in full; the CLI reads the page's link.
  assert.ok(fig.search.startsWith('?v=1&L=12&'), fig.search);
  assertAgrees(fig, cliPlan(fig.search.slice(1)));
  assert.ok(fig.fixesNeeded.length > 0);
  for (const id of ['chart-breakdown', 'chart-batch', 'chart-timeline']) {
    assert.ok((await page.locator(`#${id} svg`).count()) === 1, `${id} drawn`);
  }
  // What the page cites as "Accuracy" is on the page: the footer links to it, it outlives the
  // app's mount, and no text points to a README the page does not have.
  assert.equal(await page.locator('footer a[href="#accuracy"]').count(), 1);
  assert.ok(await page.locator('#accuracy h2').isVisible());
  assert.ok(!(await page.locator('body').innerText()).includes('README'));

  // Move the n_layer slider to 6.
  const draws = await page.evaluate(() => performance.getEntriesByName('vramfit:charts').length);
  await page.locator('input[name=n_layer-slider]').fill('6');
  await waitForCharts(page, draws + 1);
  fig = await pageFigures(page);
  assert.ok(fig.search.includes('&L=6&'), fig.search);
  assert.equal(await page.locator('input[name=n_layer]').inputValue(), '6');
  assertAgrees(fig, cliPlan(fig.search.slice(1)));

  // Six layers at micro-batch 64 still do not fit 12 GB: apply the first fix.
  assert.ok(fig.fixesNeeded.length > 0, 'L=6 at B=64 still needs a fix');
  const fixNeed = fig.fixesNeeded[0];
  const before = fig.search;
  await page.locator('ol.fixes li button.apply').first().click();
  await page.waitForFunction((s) => location.search !== s, before);
  fig = await pageFigures(page);
  assert.equal(fig.data.needed, fixNeed, 'the fix needs what it promised');
  const json = cliPlan(fig.search.slice(1));
  assertAgrees(fig, json);

  // The exported flags are the same run: `vramfit plan` with them (plus the card, which only
  // plan takes) gives the same figures.
  const flags = (await page.locator('#train-command-flags').textContent()).split(' ');
  assert.deepEqual(flags.slice(0, 2), ['vramfit', 'train']);
  const params = new URLSearchParams(fig.search);
  const viaFlags = JSON.parse(
    execFileSync(BIN, ['plan', ...flags.slice(2), '--gpu', params.get('gpu'), '--other-usage-mib', params.get('other'), '--json'], { encoding: 'utf8' }),
  );
  assertAgrees(fig, viaFlags);

  // Reopen the updated link in a fresh page: same figures.
  const again = await browser.newPage();
  await again.goto(server.url + fig.search);
  await waitForCharts(again);
  const fig2 = await pageFigures(again);
  assert.equal(fig2.search, fig.search);
  assert.deepEqual(fig2.data, fig.data);
  assert.equal(await again.locator('.notice').count(), 0, 'no notices for a link the page wrote');
  await again.close();
  await page.close();
  assert.deepEqual(errors, []);
});

test('a fine-tuning link (init=gpt2-medium) agrees with vramfit plan --json, fixes included', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(server.url + '?v=1&init=gpt2-medium&B=8&GA=4&gpu=rtx-3060');
  await waitForCharts(page);
  const fig = await pageFigures(page);
  assert.ok(fig.search.includes('&L=24&H=16&C=1024&T=1024&V=50257&') && fig.search.endsWith('&init=gpt2-medium'), fig.search);
  assert.equal(fig.verdict, 'Does not fit');
  assert.ok(fig.fixesNeeded.length > 0);
  const json = cliPlan(fig.search.slice(1));
  assertAgrees(fig, json);
  // No fix changes the checkpoint's shape.
  for (const f of json.fixes) {
    assert.deepEqual([f.config.n_layer, f.config.n_embd, f.config.vocab_size], [24, 1024, 50257], f.title);
  }
  assert.equal(await page.locator('input[name=n_layer]').isDisabled(), true);
  assert.match(await page.locator('#export-config').inputValue(), /\ninit_from = 'gpt2-medium'/);
  await page.close();
  assert.deepEqual(errors, []);
});

test('script payloads in every link field stay text; the page still works', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const dialogs = [];
  page.on('dialog', async (d) => {
    dialogs.push(d.message());
    await d.dismiss();
  });
  const payload = '<script>alert(1)</script><img src=x onerror=alert(2)><svg onload=alert(3)>';
  const keys = ['v', 'L', 'H', 'C', 'T', 'V', 'B', 'GA', 'EB', 'ET', 'EI', 'd', 'a', 'bias', 'drop', 'cmp', 'ckpt', 'opt', 'xs', 'gpu', 'other', 'init'];
  const q = keys.map((k) => `${k}=${encodeURIComponent(payload)}`).join('&') + `&${encodeURIComponent(payload)}=1`;
  await page.goto(server.url + '?' + q);
  await waitForCharts(page);
  const notice = await page.locator('.notice').textContent();
  assert.ok(notice.includes('<script>alert(1)</script>'), notice);
  // One notice per field, plus the unknown key.
  assert.equal(await page.locator('.notice li').count(), keys.length + 1);
  assert.equal(await page.locator('main img').count(), 0);
  assert.equal(await page.locator('main script').count(), 0);
  assert.equal(await page.locator('.chart svg svg').count(), 0);
  assert.deepEqual(dialogs, []);
  // Defaults: the same figures as an empty link.
  const fig = await pageFigures(page);
  assertAgrees(fig, cliPlan(fig.search.slice(1)));
  await page.close();
  assert.deepEqual(errors, []);
});

test('"Copy link" puts the page address with its state on the clipboard', async () => {
  const ctx = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(server.url + '?v=1&L=6&H=6&C=384&B=7');
  await waitForCharts(page);
  await page.locator('#copy-link').click();
  await page.waitForFunction(() => document.querySelector('#copy-link-status').textContent !== '');
  assert.equal(await page.locator('#copy-link-status').textContent(), 'Copied the link.');
  const [copied, href] = await page.evaluate(async () => [await navigator.clipboard.readText(), location.href]);
  assert.equal(copied, href);
  assert.ok(copied.includes('&L=6&H=6&C=384&') && copied.includes('&B=7&'), copied);
  await ctx.close();
  assert.deepEqual(errors, []);
});

test('a dragged slider leaves the link of where it stopped in the address bar', async () => {
  // With Chromium's limit on history calls on, as in a browser a user runs: the page wrote the
  // link on every input, and after 200 of them in 10 s Chromium ignored the rest, so the address
  // kept a batch the slider had long left.
  const limited = await launchChromium({ floodingProtection: true });
  try {
    const page = await limited.newPage();
    const warnings = [];
    page.on('console', (m) => warnings.push(m.text()));
    await page.goto(server.url + '?v=1&L=6&H=6&C=384&T=256&V=65&B=64&GA=1');
    await waitForCharts(page);
    const last = await page.evaluate(async () => {
      const slider = document.querySelector('input[name=batch_size-slider]');
      for (let i = 0; i < 260; i++) {
        slider.value = String(10 + (i % 50));
        slider.dispatchEvent(new Event('input', { bubbles: true }));
        await new Promise((r) => setTimeout(r, 1));
      }
      return slider.value;
    });
    assert.equal(last, '19');
    assert.match(await settledSearch(page), /&B=19&/);
    assert.deepEqual(warnings.filter((w) => /hrottling navigation/.test(w)), []);
    await page.close();
  } finally {
    await limited.close();
  }
});

test('arrow keys on a slider step from the value itself, not from where the thumb was rounded', async () => {
  // QA: a block of 1000 shows its thumb at 2^10 and the right arrow gave 2048; n_layer 200 from a
  // link went to 95 on the left arrow; an eval context of 768 under a block of 768 went to 256.
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const press = async (query, slider, key, box, want, inLink) => {
    await page.goto(server.url + '?v=1&' + query);
    await waitForCharts(page);
    await page.locator(`input[name=${slider}]`).focus();
    await page.keyboard.press(key);
    await page.waitForFunction(([b, w]) => document.querySelector(`input[name=${b}]`).value === w, [box, want], { timeout: 5000 }).catch(() => {});
    assert.equal(await page.locator(`input[name=${box}]`).inputValue(), want, `${query} ${slider} ${key}`);
    assert.match(await settledSearch(page), inLink, `${query} ${slider} ${key}`);
  };
  await press('T=1000', 'block_size-slider', 'ArrowRight', 'block_size', '1024', /&T=1024&/);
  await press('T=700', 'block_size-slider', 'ArrowLeft', 'block_size', '512', /&T=512&/);
  await press('L=200', 'n_layer-slider', 'ArrowLeft', 'n_layer', '96', /&L=96&/);
  await press('T=768', 'eval_block_size-slider', 'ArrowLeft', 'eval_block_size', '512', /&ET=512&/);
  await press('drop=0.13', 'dropout-slider', 'ArrowRight', 'dropout', '0.15', /&drop=0\.15&/);
  // On a step, a step as the browser takes it.
  await press('B=8', 'batch_size-slider', 'ArrowUp', 'batch_size', '9', /&B=9&/);
  await page.close();
  assert.deepEqual(errors, []);
});

test('a link to the Accuracy section opens there and keeps its anchor', async () => {
  // QA: the live link rewrote the address without `#accuracy`, and the page stayed at the top.
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(server.url + '?v=1&L=6#accuracy');
  await waitForCharts(page);
  await page.waitForFunction(() => window.scrollY > 0, null, { timeout: 5000 }).catch(() => {});
  // At the section's top, or as far down as the page goes (the section is its last).
  const where = await page.evaluate(() => ({
    top: document.querySelector('#accuracy').getBoundingClientRect().top,
    atBottom: window.scrollY + window.innerHeight >= document.documentElement.scrollHeight - 2,
    scrollY: window.scrollY,
  }));
  assert.ok(where.scrollY > 0 && where.top >= -2 && (where.top < 50 || where.atBottom), JSON.stringify(where));
  assert.equal(await page.evaluate(() => location.hash), '#accuracy');
  assert.match(await page.evaluate(() => location.search), /^\?v=1&L=6&/);
  // An edit's link keeps it; the shared link does not carry it.
  await page.locator('input[name=n_layer]').fill('5');
  assert.match(await settledSearch(page), /&L=5&/);
  assert.equal(await page.evaluate(() => location.hash), '#accuracy');
  assert.ok(!(await page.locator('#share-url').inputValue()).includes('#'));
  // Settings after `#` are no anchor: the notice names them and the address drops them.
  await page.goto(server.url + '?v=1#L=6');
  await waitForCharts(page);
  assert.match(await textWhenMatching(page, '.notice', /ignored #L=6/), /ignored #L=6/);
  assert.equal(await page.evaluate(() => location.hash), '');
  await page.close();
});

test('copying where the browser offers no clipboard (http on a LAN address) says it failed', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // Outside a secure context `navigator.clipboard` is undefined; localhost is secure, so take it away.
  await page.addInitScript(() => Object.defineProperty(Navigator.prototype, 'clipboard', { get: () => undefined }));
  await page.goto(server.url + '?v=1&L=6&H=6&C=384&B=7');
  await waitForCharts(page);
  await page.locator('#copy-link').click();
  await page.waitForFunction(() => document.querySelector('#copy-link-status').textContent !== '');
  assert.equal(await page.locator('#copy-link-status').textContent(), 'Copying failed: select the link and copy it.');
  assert.deepEqual(errors, []);
  await page.close();
});

test('out-of-range input gets a notice, never a silent change or a flag the CLI rejects', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  // Other programs hold more than the card; the link also carries dropout -0.
  await page.goto(server.url + '?v=1&drop=-0&gpu=rtx-4070&other=4194304');
  await waitForCharts(page);
  assert.match(await page.locator('.capacity-warning').textContent(), /4194304 MiB.*nothing is left/);
  // No fix is offered for a card with no room at all.
  await page.waitForSelector('.fixes-none[data-state="ready"]');
  assert.match(await page.locator('.fixes-none').textContent(), /No fix can help/);
  const flags = await page.locator('#train-command-flags').textContent();
  assert.ok(flags.includes('--dropout 0 '), flags);
  execFileSync(BIN, ['plan', ...flags.split(' ').slice(2), '--json'], { encoding: 'utf8' });
  // Typed beyond what vramfit models: a notice, and the state keeps its value.
  const type = (name, v) =>
    page.evaluate(([n, v]) => {
      const el = document.querySelector(`input[name=${n}]`);
      el.value = v;
      el.dispatchEvent(new Event('input', { bubbles: true }));
    }, [name, v]);
  await type('other_usage_mib', '99999999');
  const tooLarge = /"99999999" is too large \(at most 4194304\)/;
  assert.match(await textWhenMatching(page, '.input-error', tooLarge), tooLarge);
  assert.ok((await settledSearch(page)).endsWith('&other=4194304'));
  await type('batch_size', '-1');
  const negative = /batch_size: "-1" cannot be negative/;
  assert.match(await textWhenMatching(page, '.input-error', negative), negative);
  await type('other_usage_mib', '0');
  await page.waitForSelector('.capacity-warning', { state: 'detached', timeout: 5000 });
  // Keys a number box cannot read as a number ("1e"): the box reports no text, and the notice
  // says what happened instead of quoting "".
  await page.locator('input[name=batch_size]').click();
  await page.keyboard.press('Control+A');
  await page.keyboard.type('1e');
  await page.keyboard.press('Tab');
  const notNumber = /batch_size: what was typed \(not a number\) was not taken; back to 12/;
  assert.match(await textWhenMatching(page, '.input-error', notNumber), notNumber);
  // On a phone the verdict is a screen below the controls: a one-line copy stays on top.
  assert.equal(await page.locator('.verdict-bar').isVisible(), false);
  await page.setViewportSize({ width: 390, height: 844 });
  assert.equal(await page.locator('.verdict-bar').isVisible(), true);
  const title = await page.locator('.verdict-title').textContent();
  assert.ok((await page.locator('.verdict-bar').textContent()).startsWith(title), title);
  assert.equal(await page.locator('.fatal').count(), 0);
  await page.close();
  assert.deepEqual(errors, []);
});

test('a page whose code cannot load or start says so instead of loading for ever', async () => {
  // The wasm fails to download.
  const missing = await browser.newPage();
  await missing.route('**/*.wasm', (route) => route.fulfill({ status: 404, body: 'not found' }));
  await missing.goto(server.url);
  const fatal = missing.locator('#app > .fatal[role="alert"]');
  await fatal.waitFor({ timeout: 10000 });
  assert.match(await fatal.textContent(), /^vramfit could not start: .+Reload the page/);
  assert.equal(await missing.locator('.loading').count(), 0);
  await missing.close();
  // A browser without WebAssembly (turned off, as iOS Lockdown Mode does).
  const noWasm = await browser.newPage();
  await noWasm.addInitScript(() => {
    delete window.WebAssembly;
  });
  await noWasm.goto(server.url);
  const said = noWasm.locator('#app > .fatal[role="alert"]');
  await said.waitFor({ timeout: 10000 });
  assert.match(await said.textContent(), /does not run WebAssembly/);
  await noWasm.close();
  // A page that starts is not touched: its loading text is gone and nothing says it failed.
  const fine = await browser.newPage();
  await fine.goto(server.url);
  await waitForCharts(fine);
  assert.equal(await fine.locator('.fatal').count(), 0);
  await fine.close();
});
