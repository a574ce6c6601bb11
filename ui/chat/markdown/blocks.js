// Markdown's blocks: paragraphs, headings, rules, quotes, lists and tables, found line by line
// (fenced code is drawn by code.js, the text inside blocks by inline.js). `block` measures a
// block without drawing it when given no parent, which is how renderInto (render.js) compares
// a streaming answer's blocks with the last frame's.

import { codeBlock } from './code.js';
import { el, renderInline } from './inline.js';

const MAX_DEPTH = 12;          // quote/list nesting; deeper input degrades to paragraphs
const HEADING_RE = /^(#{1,6})(?:[ \t]+(.*))?$/;
const HR_RE = /^(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$/;
const LIST_RE = /^(?:([-*+])|(\d{1,9})([.)]))([ \t]+|$)/;
const SEP_CELL_RE = /^:?-+:?$/;
const BLANK_RE = /^[ \t]*$/;

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

export const isBlank = (s) => BLANK_RE.test(s);

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

export function parseBlocks(lines, parent, depth, tight, o) {
  for (let i = 0; i < lines.length;) i = isBlank(lines[i]) ? i + 1 : block(lines, i, parent, depth, tight, o);
}

// One block starting at the non-blank line i; returns the index of the line after it.
// With parent === null it only measures the block (renderInto compares its source).
export function block(lines, i, parent, depth, tight, o) {
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
  if (parent) parent.appendChild(codeBlock(f.lang, code.join('\n'), closed, o));
  return i;
}

function parseQuote(lines, i, parent, depth, o) {
  const inner = [];
  for (; i < lines.length; i++) {
    const t = lines[i].trimStart();
    if (t[0] === '>') inner.push(t.slice(t[1] === ' ' ? 2 : 1));
    // Lazy continuation: "> a\nb" keeps b in the quote, as in CommonMark.
    else if (inner.length && t && !isBlank(inner[inner.length - 1]) &&
      !interrupts(lines[i], lines[i + 1])) inner.push(t);
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
