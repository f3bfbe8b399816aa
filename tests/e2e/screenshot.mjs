// Takes the README's screenshot (docs/page.png) of the built page: GPT-2 124M on the default
// 12 GB card, as a first visit shows it. Usage: trunk build --release --offline, then
// node tests/e2e/screenshot.mjs [link query, default: none].
import path from 'node:path';
import { ROOT, serveDist, launchChromium, waitForCharts } from './harness.mjs';

const query = process.argv[2] || '';
const server = await serveDist();
const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, colorScheme: 'light' });
  await page.goto(server.url + query);
  await waitForCharts(page);
  // Fixes are computed 150 ms after the state settles; wait until they are shown.
  await page.waitForSelector('[data-state="ready"]', { timeout: 20000 });
  const out = path.join(ROOT, 'docs', 'page.png');
  await page.screenshot({ path: out, fullPage: true });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
  await server.close();
}
