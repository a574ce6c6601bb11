// Safe Markdown -> DOM for the chat's answers: renderMarkdown (a fragment) and renderInto
// (re-render a streaming answer in place). The parts: blocks.js (paragraphs, headings, quotes,
// lists, tables), code.js (fenced code with its Copy button), inline.js (emphasis, code spans,
// links, entities).
//
// Why our own renderer, not marked + DOMPurify: the page works offline and the UI has no build
// step, so a library would have to be copied into the repository (the project copies no code
// from others) or come through npm, which would put Node and a build into every user's install,
// every developer's setup and CI. A chat answer needs a small, fixed subset of Markdown, and
// building the DOM ourselves leaves nothing to sanitise afterwards.
//
// Why it looks the way it does:
// - Model output is untrusted. Every node is made with createElement /
//   createTextNode / setAttribute, so input text can only ever become text;
//   there is no HTML parsing path at all (raw "<script>" is just characters).
// - Answers stream in and the whole text is re-rendered on every chunk, so the
//   parser must never throw on half-written input and must stay roughly linear:
//   regexes are anchored or sticky, nothing rescans the rest of the text per
//   character, and nesting is capped so hostile input cannot blow the stack.

import { block, isBlank, parseBlocks } from './blocks.js';
import { el } from './inline.js';

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
    const lines = toText(text).split('\n'), old = valid ? prev.blocks : [], blocks = [],
      frag = document.createDocumentFragment();
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
