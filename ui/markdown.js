// Safe Markdown -> DOM renderer for the chat UI.
//
// Why it looks the way it does:
// - Model output is untrusted. Every node is made with createElement /
//   createTextNode / setAttribute, so input text can only ever become text;
//   there is no HTML parsing path at all (raw "<script>" is just characters).
// - Answers stream in and the whole text is re-rendered on every chunk, so the
//   parser must never throw on half-written input and must stay roughly linear:
//   regexes are anchored or sticky, nothing rescans the rest of the text per
//   character, and nesting is capped so hostile input cannot blow the stack.

import { copyText } from './dom.js';

const MAX_DEPTH = 12;          // quote/list nesting; deeper input degrades to paragraphs
const MAX_INLINE_DEPTH = 16;  // emphasis nesting actually turned into elements
const MAX_URL = 4096;          // bound for scanning a link destination or title
const SAFE_PROTOCOLS = new Set(['http:', 'https:', 'mailto:']);
const SAFE_LANG = /^[\w#+.-]{1,40}$/;
const HEADING_RE = /^(#{1,6})(?:[ \t]+(.*))?$/;
const HR_RE = /^(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$/;
const LIST_RE = /^(?:([-*+])|(\d{1,9})([.)]))([ \t]+|$)/;
const SEP_CELL_RE = /^:?-+:?$/;
const BLANK_RE = /^[ \t]*$/;
// One scan stops at every character that can start inline syntax; plain text in between is copied in bulk.
const SPECIAL_RE = /[\\`*_~[!<&\n]|https?:\/\//gi;
const AUTOLINK_RE = /<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>/y;
const EMAIL_RE = /<([^\s<>@\\]+@[^\s<>@\\]+\.[^\s<>@\\.]+)>/y;
// Bare URLs stop at CJK/full-width punctuation: "見https://x.com。" must not swallow the "。".
const BARE_URL_RE = /https?:\/\/[^\s<>"`\u3000-\u303f\uff00-\uffef]+/iy;
// Entities decode to text (never markup); only the few that models actually emit are named.
const ENTITY_RE = /&(?:#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6})|(amp|lt|gt|quot|apos|nbsp));/y;
const NAMED = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0' };
const ESCAPED_RE = /\\([!-/:-@[-`{-~])/g;
const PUNCT_RE = /[\p{P}\p{S}]/u;
const WS_RE = /\s/;
// CommonMark's flanking rules misfire on CJK text ("**重點：**這裡" never closes), so for * and ~
// ideographs/kana/hangul/full-width forms count like punctuation, which lets those runs open and close.
const CJK_RE = /[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]/;

export function renderMarkdown(text, opts = {}) {
  const o = options(opts);
  let frag = document.createDocumentFragment(), src = '';
  try {
    src = toText(text);
    parseBlocks(src.split('\n'), frag, 0, false, o);
  } catch (err) {
    frag = fallback(src);
  }
  return frag;
}

// Streaming re-renders the whole text on every chunk; rebuilding every node each time would
// cost ~1 ms per KB and would swap Copy buttons out from under the user's pointer. So the
// top-level blocks whose source did not change since the last call keep their DOM nodes.
// A block renders from its own lines only, so equal source means an identical subtree.
const views = new WeakMap();   // element -> { sig, count, last, blocks: [{ key, nodes }] }

export function renderInto(element, text, opts = {}) {
  const o = options(opts), sig = o.copyLabel + '\0' + o.copiedLabel + '\0' + o.copyAriaLabel;
  const prev = views.get(element);
  // Reuse only while the element still holds exactly our last output (someone may have cleared it).
  const valid = prev && prev.sig === sig && element.childNodes.length === prev.count && element.lastChild === prev.last;
  views.delete(element);
  try {
    const lines = toText(text).split('\n'), old = valid ? prev.blocks : [], blocks = [], frag = document.createDocumentFragment();
    let kept = 0, count = 0;
    for (let i = 0; i < lines.length;) {
      if (isBlank(lines[i])) { i++; continue; }
      const end = block(lines, i, null, 0, false, o), key = lines.slice(i, end).join('\n');
      if (kept === blocks.length && kept < old.length && old[kept].key === key) blocks.push(old[kept++]);
      else {
        const f = document.createDocumentFragment();
        block(lines, i, f, 0, false, o);
        blocks.push({ key, nodes: Array.from(f.childNodes) });
        frag.appendChild(f);
      }
      count += blocks[blocks.length - 1].nodes.length;
      i = end;
    }
    if (valid) {
      for (let k = kept; k < old.length; k++) for (const nd of old[k].nodes) nd.remove();
      element.appendChild(frag);
    } else element.replaceChildren(frag);
    views.set(element, { sig, count, last: element.lastChild, blocks });
  } catch (err) {
    element.replaceChildren(renderMarkdown(text, opts));
  }
}

function options(opts) {
  opts = opts || {};   // null must not throw either
  return {
    copyLabel: opts.copyLabel || 'Copy',
    copiedLabel: opts.copiedLabel || 'Copied',
    copyAriaLabel: opts.copyAriaLabel || opts.copyLabel || 'Copy',
  };
}

function toText(text) {
  const s = typeof text === 'string' ? text : text == null ? '' : String(text);
  return s.replace(/\r\n?/g, '\n');
}

// Last line of defence: a renderer bug must not blank the message or stop the stream.
function fallback(src) {
  const frag = document.createDocumentFragment(), p = frag.appendChild(el('p'));
  p.style.whiteSpace = 'pre-wrap';
  p.textContent = src;
  return frag;
}

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

// ---------------------------------------------------------------- blocks

// Columns of leading whitespace (tab = to next multiple of 4). Tabs are kept in the
// text itself because code blocks must copy out exactly (Makefiles need their tabs).
function indentOf(s) {
  let col = 0;
  for (let i = 0; i < s.length; i++) {
    if (s[i] === ' ') col++;
    else if (s[i] === '\t') col += 4 - (col % 4);
    else break;
  }
  return col;
}

function stripCols(s, n) {
  let col = 0, i = 0;
  while (i < s.length && col < n && (s[i] === ' ' || s[i] === '\t')) {
    col += s[i] === ' ' ? 1 : 4 - (col % 4);
    i++;
  }
  return s.slice(i);
}

const isBlank = (s) => BLANK_RE.test(s);

function fenceInfo(t) {
  const c = t[0];
  if (c !== '`' && c !== '~') return null;
  let k = 0;
  while (t[k] === c) k++;
  if (k < 3) return null;
  const info = t.slice(k).trim();
  if (c === '`' && info.includes('`')) return null;   // "```x```" on one line is inline code
  return { ch: c, len: k, lang: info.split(/\s/)[0] };
}

function closesFence(line, f) {
  const t = line.trimStart();
  let k = 0;
  while (t[k] === f.ch) k++;
  return k >= f.len && isBlank(t.slice(k));
}

function listMarker(line) {
  const t = line.trimStart();
  const m = LIST_RE.exec(t);
  if (!m) return null;
  const ind = indentOf(line), mlen = (m[1] || m[2] + m[3]).length, sp = m[4].length;
  const content = t.slice(m[0].length);
  return {
    ind, ordered: !m[1], start: m[2] ? parseInt(m[2], 10) : 1, content,
    ci: ind + mlen + (content && sp <= 4 ? sp : 1),   // column where the item's own text starts
  };
}

function splitRow(line) {
  let s = line.trim();
  if (s[0] === '|') s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\') i++;
    else if (s[i] === '|') { cells.push(s.slice(start, i)); start = i + 1; }
  }
  cells.push(s.slice(start));
  // GFM unescapes "\|" before inline parsing, so `a\|b` in a cell shows a|b even inside code.
  return cells.map((c) => c.trim().replace(/\\\|/g, '|'));
}

function isTableStart(line, next) {
  if (next === undefined || !line.includes('|') || !next.includes('|') || !next.includes('-')) return false;
  const sep = splitRow(next);
  return sep.every((c) => SEP_CELL_RE.test(c)) && sep.length === splitRow(line).length;
}

// Does `line` end the paragraph (or list-item text) above it?
function interrupts(line, next) {
  const t = line.trimStart();
  if (!t) return true;
  const c = t[0];
  if (fenceInfo(t) || c === '>' || (c === '#' && HEADING_RE.test(t)) || HR_RE.test(t)) return true;
  const m = listMarker(line);
  // CommonMark: only non-empty items, and only ordered lists starting at 1, so that
  // "in\n2024. it rained" stays one paragraph.
  if (m && m.content.trim() && (!m.ordered || m.start === 1)) return true;
  return isTableStart(line, next);
}

function parseBlocks(lines, parent, depth, tight, o) {
  for (let i = 0; i < lines.length;) i = isBlank(lines[i]) ? i + 1 : block(lines, i, parent, depth, tight, o);
}

// One block starting at the non-blank line i; returns the index of the line after it.
// With parent === null it only measures the block (renderInto compares its source).
function block(lines, i, parent, depth, tight, o) {
  const line = lines[i], t = line.trimStart(), fence = fenceInfo(t), nest = depth < MAX_DEPTH;
  let m;
  if (fence) return parseFence(lines, i + 1, fence, indentOf(line), parent, o);
  if ((m = HEADING_RE.exec(t))) {
    const tag = m[1].length === 1 ? 'h3' : m[1].length === 2 ? 'h4' : 'h5';   // chat answers need no giant h1
    if (parent) renderInline(stripClosingHashes(m[2] || ''), parent.appendChild(el(tag)), false);
    return i + 1;
  }
  if (HR_RE.test(t)) {
    if (parent) parent.appendChild(el('hr'));
    return i + 1;
  }
  if (nest && t[0] === '>') return parseQuote(lines, i, parent, depth, o);
  if (nest && listMarker(line)) return parseList(lines, i, parent, depth, o);
  if (isTableStart(line, lines[i + 1])) return parseTable(lines, i, parent);
  const para = [t.trimEnd()];
  for (i++; i < lines.length && !interrupts(lines[i], lines[i + 1]); i++) para.push(lines[i].trim());
  // Tight list items hold their text directly, as users of every chat UI expect.
  if (parent) renderInline(para.join('\n'), tight ? parent : parent.appendChild(el('p')), false);
  return i;
}

function stripClosingHashes(s) {
  s = s.trimEnd();
  let k = s.length;
  while (k > 0 && s[k - 1] === '#') k--;
  return k === 0 ? '' : s[k - 1] === ' ' || s[k - 1] === '\t' ? s.slice(0, k).trimEnd() : s;
}

function parseFence(lines, i, f, ind, parent, o) {
  const code = [];
  let closed = false;
  for (; i < lines.length; i++) {
    if (closesFence(lines[i], f)) { closed = true; i++; break; }
    code.push(stripCols(lines[i], ind));
  }
  if (!closed) {
    // Streaming: hide a half-typed closing fence or trailing newline so the block doesn't flicker.
    const last = code.length ? code[code.length - 1].trim() : null;
    if (last === '' || (last && last.length < f.len && !last.replace(f.ch === '`' ? /`/g : /~/g, ''))) code.pop();
  }
  if (!parent) return i;
  const box = el('div', 'md-code'), bar = el('div', 'md-code-bar'), lang = el('span', 'md-code-lang');
  const pre = el('pre'), codeEl = el('code');
  if (!closed) box.setAttribute('data-open', '');   // lets the UI style a still-streaming block
  lang.textContent = f.lang;
  if (SAFE_LANG.test(f.lang)) codeEl.className = 'language-' + f.lang;
  codeEl.textContent = code.join('\n');
  bar.append(lang, copyButton(codeEl, o));
  pre.appendChild(codeEl);
  box.append(bar, pre);
  parent.appendChild(box);
  return i;
}

function copyButton(codeEl, o) {
  const btn = el('button', 'md-copy');
  btn.type = 'button';
  btn.setAttribute('data-copy', '');
  btn.setAttribute('aria-label', o.copyAriaLabel);
  btn.textContent = o.copyLabel;
  let timer = 0;
  btn.addEventListener('click', async () => {
    if (!(await copyText(codeEl.textContent))) return;
    btn.textContent = o.copiedLabel;
    btn.setAttribute('aria-label', o.copiedLabel);
    clearTimeout(timer);
    timer = setTimeout(() => {
      btn.textContent = o.copyLabel;
      btn.setAttribute('aria-label', o.copyAriaLabel);
    }, 1500);
  });
  return btn;
}


function parseQuote(lines, i, parent, depth, o) {
  const inner = [];
  for (; i < lines.length; i++) {
    const t = lines[i].trimStart();
    if (t[0] === '>') inner.push(t.slice(t[1] === ' ' ? 2 : 1));
    // Lazy continuation: "> a\nb" keeps b in the quote, as in CommonMark.
    else if (inner.length && t && !isBlank(inner[inner.length - 1]) && !interrupts(lines[i], lines[i + 1])) inner.push(t);
    else break;
  }
  if (parent) parseBlocks(inner, parent.appendChild(el('blockquote')), depth + 1, false, o);
  return i;
}

// Nesting is by indentation: a line indented at least 2 columns past the item's marker
// belongs to that item. This is looser than CommonMark (which wants the content column)
// because models often nest "  - x" under "1. y", and users expect that to nest.
function parseList(lines, i, parent, depth, o) {
  const first = listMarker(lines[i]), base = first.ind, n = lines.length, items = [];
  let loose = false;
  outer: while (i < n) {
    const mk = listMarker(lines[i]);
    const item = [mk.content];
    items.push(item);
    let fence = fenceInfo(mk.content);
    for (i++; i < n;) {
      if (fence) {   // inside a code block every line belongs to the item, whatever its indent
        item.push(stripCols(lines[i], mk.ci));
        if (closesFence(lines[i], fence)) fence = null;
        i++;
        continue;
      }
      let j = i;
      while (j < n && isBlank(lines[j])) j++;
      if (j === n) { i = j; break outer; }
      const next = lines[j], gap = j > i;
      if (indentOf(next) >= base + 2) {
        if (gap) { loose = true; for (; i < j; i++) item.push(''); }
        const s = stripCols(next, mk.ci);
        item.push(s);
        fence = fenceInfo(s.trimStart());
        i = j + 1;
        continue;
      }
      const sib = listMarker(next);
      if (sib && sib.ordered === first.ordered && !HR_RE.test(next.trimStart())) {
        if (gap) loose = true;
        i = j;
        continue outer;
      }
      if (!gap && !sib && !interrupts(next, lines[j + 1])) { item.push(next.trimStart()); i = j + 1; continue; }
      break outer;
    }
  }
  if (!parent) return i;
  const list = parent.appendChild(el(first.ordered ? 'ol' : 'ul'));
  if (first.ordered && first.start !== 1) list.setAttribute('start', String(first.start));
  for (const item of items) parseBlocks(item, list.appendChild(el('li')), depth + 1, !loose, o);
  return i;
}

function parseTable(lines, i, parent) {
  const start = i;
  for (i += 2; i < lines.length && lines[i].includes('|') && !interrupts(lines[i]); i++);
  if (!parent) return i;
  const head = splitRow(lines[start]);
  const aligns = splitRow(lines[start + 1]).map((c) => {
    const l = c[0] === ':', r = c[c.length - 1] === ':';
    return l && r ? 'center' : r ? 'right' : l ? 'left' : '';
  });
  const table = parent.appendChild(el('div', 'md-table-wrap')).appendChild(el('table'));
  const row = (cells, tag, into) => {
    const tr = into.appendChild(el('tr'));
    for (let k = 0; k < head.length; k++) {   // GFM: rows are padded/cut to the header width
      const cell = tr.appendChild(el(tag));
      if (aligns[k]) cell.style.textAlign = aligns[k];   // CSSOM, not a style attribute: fine under a strict CSP
      renderInline(cells[k] || '', cell, false);
    }
  };
  row(head, 'th', table.appendChild(el('thead')));
  const body = i > start + 2 ? table.appendChild(el('tbody')) : null;
  for (let k = start + 2; k < i; k++) row(splitRow(lines[k]), 'td', body);
  return i;
}

// ---------------------------------------------------------------- inlines
//
// Inline text becomes a linked list of items (text, finished DOM nodes, delimiter
// runs); emphasis is then resolved with CommonMark's delimiter-stack algorithm,
// wrapping list ranges in O(1), and only at the end turned into DOM.

function push(list, item) {
  item.prev = list.tail;
  item.next = null;
  if (list.tail) list.tail.next = item; else list.head = item;
  list.tail = item;
  return item;
}

function safeHref(raw) {
  try {
    const u = new URL(raw.trim());   // relative URLs throw here, and so become plain text
    return SAFE_PROTOCOLS.has(u.protocol) ? u.href : null;
  } catch (e) {
    return null;
  }
}

function makeLink(href, title) {
  const a = el('a');
  a.setAttribute('href', href);
  a.setAttribute('target', '_blank');
  a.setAttribute('rel', 'noopener noreferrer');
  if (title) a.setAttribute('title', title);
  return a;
}

// Matching "]" for every "[", in one pass, so link parsing never rescans the text.
function matchBrackets(src) {
  const out = new Int32Array(src.length).fill(-1), stack = [];
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === '\\') i++;
    else if (c === '[') stack.push(i);
    else if (c === ']' && stack.length) out[stack.pop()] = i;
  }
  return out;
}

// Positions of backtick runs, grouped by length, so each code span finds its closer in O(1) amortised.
function tickRuns(src) {
  const runs = new Map();
  for (let i = src.indexOf('`'); i >= 0; i = src.indexOf('`', i)) {
    let k = i;
    while (src[k] === '`') k++;
    if (!runs.has(k - i)) runs.set(k - i, { pos: [], at: 0 });
    runs.get(k - i).pos.push(i);
    i = k;
  }
  return runs;
}

// "(dest "title")" after a "]"; null when it is not a well-formed link tail.
// `st.budget` caps the characters all attempts in one text may scan: "[a](" repeated
// thousands of times would otherwise rescan the same tail for every bracket.
function linkTail(src, i, st) {
  if (src[i] !== '(' || st.budget <= 0) return null;
  const start = i, lim = Math.min(src.length, i + Math.min(MAX_URL, st.budget));
  const skipWs = () => { while (i < lim && (src[i] === ' ' || src[i] === '\t' || src[i] === '\n')) i++; };
  const done = (r) => { st.budget -= i - start; return r; };
  i++;
  skipWs();
  let dest, title = '';
  if (src[i] === '<') {
    const s = ++i;
    while (i < lim && src[i] !== '>' && src[i] !== '<' && src[i] !== '\n') i += src[i] === '\\' ? 2 : 1;
    if (src[i] !== '>') return done(null);
    dest = src.slice(s, i++);
  } else {
    const s = i;
    // Balanced parentheses are part of the URL: [w](https://en.wikipedia.org/wiki/Foo_(bar))
    for (let depth = 0; i < lim; i++) {
      const c = src[i];
      if (c === '\\') i++;
      else if (c === '(') depth++;
      else if (c === ')') { if (!depth) break; depth--; }
      else if (c <= ' ') break;
    }
    dest = src.slice(s, i);
  }
  skipWs();
  const q = src[i];
  if (q === '"' || q === "'" || (q === '(' && dest)) {
    const end = q === '(' ? ')' : q, s = ++i;
    while (i < lim && src[i] !== end) i += src[i] === '\\' ? 2 : 1;
    if (src[i] !== end) return done(null);
    title = src.slice(s, i++);
    skipWs();
  }
  if (src[i] !== ')' || i >= lim) return done(null);
  return done({ dest: dest.replace(ESCAPED_RE, '$1'), title: title.replace(ESCAPED_RE, '$1'), end: i + 1 });
}

function isPunct(c, cjk) {
  return PUNCT_RE.test(c) || (cjk && CJK_RE.test(c));
}

function renderInline(src, parent, noLinks) {
  const list = { head: null, tail: null }, delims = { head: null, tail: null };
  const brackets = src.includes('[') ? matchBrackets(src) : null;
  const ticks = src.includes('`') ? tickRuns(src) : null;
  const n = src.length, st = { budget: 2 * n + 2 * MAX_URL };
  let text = '', i = 0;
  const flush = () => { if (text) { push(list, { t: 'text', s: text }); text = ''; } };
  const add = (node) => { flush(); push(list, { t: 'dom', node }); };
  const re = new RegExp(SPECIAL_RE);   // own lastIndex: link labels recurse into this function
  while (i < n) {
    re.lastIndex = i;
    const m = re.exec(src);
    if (!m) { text += src.slice(i); break; }
    text += src.slice(i, m.index);
    i = m.index;
    const c = src[i];
    if (c === '\\') {
      const d = src[i + 1];
      if (d === '\n') { add(el('br')); i += 2; }
      else if (d && /[!-/:-@[-`{-~]/.test(d)) { text += d; i += 2; }
      else { text += c; i++; }
    } else if (c === '\n') {
      add(el('br'));
      i++;
    } else if (c === '`') {
      let k = i;
      while (src[k] === '`') k++;
      const len = k - i, run = ticks.get(len);
      while (run && run.at < run.pos.length && run.pos[run.at] < k) run.at++;
      if (run && run.at < run.pos.length) {
        const end = run.pos[run.at];
        let s = src.slice(k, end).replace(/\n/g, ' ');
        if (s.length > 2 && s[0] === ' ' && s[s.length - 1] === ' ' && s.trim()) s = s.slice(1, -1);
        const code = el('code');
        code.textContent = s;
        add(code);
        i = end + len;
      } else { text += src.slice(i, k); i = k; }   // unclosed (e.g. mid-stream): literal backticks
    } else if (c === '*' || c === '_' || c === '~') {
      let k = i;
      while (src[k] === c) k++;
      const len = k - i;
      if (c === '~' && len !== 2) { text += src.slice(i, k); i = k; continue; }   // "~5 min" is not strikethrough
      const cjk = c !== '_', b = i > 0 ? src[i - 1] : ' ', a = k < n ? src[k] : ' ';
      const bW = WS_RE.test(b), aW = WS_RE.test(a), bP = isPunct(b, cjk), aP = isPunct(a, cjk);
      const left = !aW && (!aP || bW || bP), right = !bW && (!bP || aW || aP);
      // "_" must not open/close inside words, so snake_case_names stay intact.
      const open = c === '_' ? left && (!right || bP) : left, close = c === '_' ? right && (!left || aP) : right;
      flush();
      const d = push(list, { t: 'text', s: src.slice(i, k), ch: c, n: len, orig: len, open, close, dprev: null, dnext: null });
      if (open || close) {
        d.dprev = delims.tail;
        if (delims.tail) delims.tail.dnext = d; else delims.head = d;
        delims.tail = d;
      }
      i = k;
    } else if (c === '[' || (c === '!' && src[i + 1] === '[')) {
      const b = c === '!' ? i + 1 : i, close = brackets[b];
      const tail = close > 0 && (c === '!' || !noLinks) ? linkTail(src, close + 1, st) : null;
      if (!tail) { text += c; i++; continue; }
      const label = src.slice(b + 1, close);
      if (c === '!') {
        // Images are never loaded (no request may leave the machine): show the alt text instead.
        const span = el('span', 'md-img-alt');
        span.textContent = label.replace(ESCAPED_RE, '$1') || 'image';
        add(span);
      } else {
        const href = safeHref(tail.dest);
        const box = href ? makeLink(href, tail.title) : el('span');
        renderInline(label, box, true);
        add(box);
      }
      i = tail.end;
    } else if (c === '<') {
      let mm, href = null;
      if (!noLinks) {
        AUTOLINK_RE.lastIndex = EMAIL_RE.lastIndex = i;
        if ((mm = AUTOLINK_RE.exec(src))) href = safeHref(mm[1]);
        else if ((mm = EMAIL_RE.exec(src))) href = safeHref('mailto:' + mm[1]);
      }
      if (href) {
        const a = makeLink(href);
        a.textContent = mm[1];
        add(a);
        i += mm[0].length;
      } else { text += c; i++; }
    } else if (c === '&') {
      ENTITY_RE.lastIndex = i;
      const e = ENTITY_RE.exec(src), cp = e && (e[3] ? -1 : parseInt(e[1] || e[2], e[1] ? 10 : 16));
      if (!e) text += c;
      else if (cp < 0) text += NAMED[e[3]];
      else text += cp > 0 && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff) ? String.fromCodePoint(cp) : '\ufffd';
      i += e ? e[0].length : 1;
    } else if (c === '!') {
      text += c;
      i++;
    } else {   // bare http(s):// URL
      BARE_URL_RE.lastIndex = i;
      const u = !noLinks && (i === 0 || !/[A-Za-z0-9]/.test(src[i - 1])) ? BARE_URL_RE.exec(src) : null;
      const url = u ? trimUrl(u[0]) : '';
      const href = url.length > m[0].length ? safeHref(url) : null;
      if (href) {
        const a = makeLink(href);
        a.textContent = url;
        add(a);
        i += url.length;
      } else { text += m[0]; i += m[0].length; }
    }
  }
  flush();
  resolveEmphasis(delims);
  emit(list, parent);
}

// Sentence punctuation after a bare URL is not part of it; a ")" is, only when balanced.
function trimUrl(u) {
  let opens = 0, closes = 0, end = u.length;
  for (const ch of u) { if (ch === '(') opens++; else if (ch === ')') closes++; }
  while (end > 0) {
    const c = u[end - 1];
    if ('.,:;!?\'"*_~]'.includes(c)) end--;
    else if (c === ')' && closes > opens) { closes--; end--; }
    else break;
  }
  return u.slice(0, end);
}

// CommonMark "process emphasis". `bottoms` remembers how far back a failed search
// already looked, which keeps runs of unmatched delimiters from going quadratic.
function resolveEmphasis(delims) {
  const bottoms = new Map();
  let closer = delims.head;
  while (closer) {
    if (!closer.close) { closer = closer.dnext; continue; }
    const key = closer.ch + closer.open + (closer.orig % 3), bottom = bottoms.get(key);
    let op = closer.dprev;
    while (op && op !== bottom && !(op.ch === closer.ch && op.open && canPair(op, closer))) op = op.dprev;
    if (op && op !== bottom) {
      const use = closer.ch === '~' || (op.n >= 2 && closer.n >= 2) ? 2 : 1;
      const wrap = { t: 'el', tag: closer.ch === '~' ? 'del' : use === 2 ? 'strong' : 'em', prev: op, next: closer, head: null, tail: null };
      if (op.next !== closer) {
        wrap.head = op.next; wrap.tail = closer.prev;
        wrap.head.prev = null; wrap.tail.next = null;
      }
      op.next = wrap; closer.prev = wrap;
      op.n -= use; closer.n -= use;
      op.s = op.s.slice(use); closer.s = closer.s.slice(use);
      op.dnext = closer; closer.dprev = op;   // delimiters inside the new element are done
      if (!op.n) unlinkDelim(delims, op);
      if (!closer.n) { const nx = closer.dnext; unlinkDelim(delims, closer); closer = nx; }
    } else {
      bottoms.set(key, closer.dprev);
      const nx = closer.dnext;
      if (!closer.open) unlinkDelim(delims, closer);
      closer = nx;
    }
  }
}

function canPair(op, cl) {
  if (cl.ch === '~') return op.orig === 2 && cl.orig === 2;
  // The "rule of 3" keeps ***a** b* and similar runs pairing the CommonMark way.
  return !((op.close || cl.open) && (op.orig + cl.orig) % 3 === 0 && (op.orig % 3 || cl.orig % 3));
}

function unlinkDelim(delims, d) {
  if (d.dprev) d.dprev.dnext = d.dnext; else delims.head = d.dnext;
  if (d.dnext) d.dnext.dprev = d.dprev; else delims.tail = d.dprev;
}

function emit(list, parent, depth = 0) {
  let buf = '';
  for (let x = list.head; x; x = x.next) {
    if (x.t === 'text') { buf += x.s; continue; }
    if (buf) { parent.appendChild(document.createTextNode(buf)); buf = ''; }
    if (x.t === 'dom') parent.appendChild(x.node);
    // Inserting into a deep tree costs Chrome O(depth) per node, so absurd
    // nesting ("*a *a *a ... a* a* a*") is flattened instead of going quadratic.
    else if (depth >= MAX_INLINE_DEPTH) emit(x, parent, depth + 1);
    else emit(x, parent.appendChild(el(x.tag)), depth + 1);
  }
  if (buf) parent.appendChild(document.createTextNode(buf));
}
