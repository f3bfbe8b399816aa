// Shared by the end-to-end test and the benchmark: a static file server for dist/ (in this
// process, so nothing is left running) and Debian's Chromium driven by playwright-core.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const DIST = process.env.VRAMFIT_DIST || path.join(ROOT, 'dist');

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.wasm': 'application/wasm',
  '.css': 'text/css',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
};

/** Serves DIST on 127.0.0.1 at a free port; resolves to { url, close }. */
export function serveDist() {
  if (!fs.existsSync(path.join(DIST, 'index.html'))) {
    throw new Error(`${DIST}/index.html missing: build the page first (trunk build --release --offline)`);
  }
  const server = http.createServer((req, res) => {
    const urlPath = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const rel = urlPath === '/' ? 'index.html' : urlPath.replace(/^\/+/, '');
    const file = path.resolve(DIST, rel);
    if (!file.startsWith(DIST) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] || 'application/octet-stream', 'cache-control': 'no-store' });
    fs.createReadStream(file).pipe(res);
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({ url: `http://127.0.0.1:${port}/`, close: () => new Promise((r) => server.close(r)) });
    });
  });
}

/** Launches headless Chromium (Debian's, or $CHROMIUM). playwright-core owns the process and
 *  kills it on browser.close(). */
export function launchChromium({ floodingProtection = false } = {}) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
    // playwright turns off Chromium's limit on history calls (200 in 10 s); a browser a user
    // runs has it, and a test of the live link during a drag needs it.
    ignoreDefaultArgs: floodingProtection ? ['--disable-ipc-flooding-protection'] : [],
  });
}

/** Waits until the page has drawn its charts at least `count` times. */
export async function waitForCharts(page, count = 1) {
  await page.waitForFunction((n) => performance.getEntriesByName('vramfit:charts').length >= n, count, { timeout: 20000 });
}
