// Markdown inside a block: code spans, emphasis and strikethrough, links, autolinks, bare URLs,
// entities, hard breaks. Images never load; their alt text shows instead.
//
// Inline text becomes a linked list of items (text, finished DOM nodes, delimiter
// runs); emphasis is then resolved with CommonMark's delimiter-stack algorithm,
// wrapping list ranges in O(1), and only at the end turned into DOM.

const MAX_INLINE_DEPTH = 16;  // emphasis nesting actually turned into elements
const MAX_URL = 4096;          // bound for scanning a link destination or title
const SAFE_PROTOCOLS = new Set(['http:', 'https:', 'mailto:']);
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

// The one element maker: blocks.js and code.js build with it too.
export function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

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

export function renderInline(src, parent, noLinks) {
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
      const d = push(list, { t: 'text', s: src.slice(i, k), ch: c, n: len, orig: len, open, close,
        dprev: null, dnext: null });
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
      const wrap = { t: 'el', tag: closer.ch === '~' ? 'del' : use === 2 ? 'strong' : 'em',
        prev: op, next: closer, head: null, tail: null };
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
