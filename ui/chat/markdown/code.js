// A fenced code block as the chat shows it: the language, a Copy button, and the code as
// text (never highlighted markup). The button copies the code exactly, tabs included.

import { copyText } from '../../dom.js';
import { el } from './inline.js';

const SAFE_LANG = /^[\w#+.-]{1,40}$/;

// The box for one fence: `lang` its info word, `code` its lines joined, `closed` false while streaming.
export function codeBlock(lang, code, closed, o) {
  const box = el('div', 'md-code'), bar = el('div', 'md-code-bar'), langEl = el('span', 'md-code-lang');
  const pre = el('pre'), codeEl = el('code');
  if (!closed) box.setAttribute('data-open', '');   // lets the UI style a still-streaming block
  langEl.textContent = lang;
  if (SAFE_LANG.test(lang)) codeEl.className = 'language-' + lang;
  codeEl.textContent = code;
  bar.append(langEl, copyButton(codeEl, o));
  pre.appendChild(codeEl);
  box.append(bar, pre);
  return box;
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
