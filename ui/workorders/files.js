// Reading a customer's message from a file the user dropped or chose: a plain .txt, or an
// .eml saved from a mail program. No page state: a File or its bytes in, text out; all but
// readMessageFile() are pure functions.
//
// Why this much: mail comes from every kind of client. Bodies come base64 or quoted-printable,
// in UTF-8 or Big5 (older Taiwanese Windows setups), often multipart with an HTML copy, and
// headers carry RFC 2047 encoded words. The model needs the readable text, and the sent date
// from the Date header anchors "next Friday" in the message.
//
// The work is done on "binary strings" (one char per byte, as atob gives them) so that the
// transfer decodings and the charset decoding stay separate steps.

/** Bytes -> a binary string; in chunks, as apply() has an argument limit. */
function binaryString(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return s;
}

function bytesOf(binary) {
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i) & 0xff;
  return out;
}

/** A local date as YYYY-MM-DD (what <input type="date"> and the server's sent_date take). */
export function isoDate(d) {
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

/** Bytes as text: the charset named, else UTF-8, else Big5 (older Taiwanese Windows files). */
export function decodeText(bytes, charset = null) {
  if (charset) {
    try {
      return new TextDecoder(charset).decode(bytes);
    } catch { /* an unknown charset label: guess below */ }
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    try {
      return new TextDecoder("big5", { fatal: true }).decode(bytes);
    } catch {
      return new TextDecoder("utf-8").decode(bytes);
    }
  }
}

function headerParam(value, name) {
  const m = new RegExp(`;\\s*${name}\\s*=\\s*(?:"([^"]*)"|([^;\\s]+))`, "i").exec(value || "");
  return m ? (m[1] ?? m[2]) : null;
}

/** RFC 2047 words in headers: =?UTF-8?B?...?= and =?Big5?Q?...?=. */
function decodeHeader(binary) {
  const joined = binary.replace(/\?=\s+=\?/g, "?==?");
  let out = "";
  let last = 0;
  for (const m of joined.matchAll(/=\?([^?]+)\?([BbQq])\?([^?]*)\?=/g)) {
    out += decodeText(bytesOf(joined.slice(last, m.index)));
    let raw;
    try {
      raw = m[2].toUpperCase() === "B" ? atob(m[3])
        : m[3].replace(/_/g, " ").replace(/=([0-9A-Fa-f]{2})/g, (x, hex) => String.fromCharCode(parseInt(hex, 16)));
    } catch {
      raw = m[0];
    }
    out += decodeText(bytesOf(raw), m[1].replace(/\*.*$/, ""));
    last = m.index + m[0].length;
  }
  return (out + decodeText(bytesOf(joined.slice(last)))).trim();
}

/** A MIME entity -> {headers (lower-case names, first one wins, folded lines joined), body}. */
function splitMessage(binary) {
  const m = /\r?\n\r?\n/.exec(binary);
  const head = m ? binary.slice(0, m.index) : binary;
  const body = m ? binary.slice(m.index + m[0].length) : "";
  const headers = {};
  for (const line of head.replace(/\r?\n[ \t]+/g, " ").split(/\r?\n/)) {
    const c = line.indexOf(":");
    if (c > 0) {
      const key = line.slice(0, c).trim().toLowerCase();
      if (!(key in headers)) headers[key] = line.slice(c + 1).trim();
    }
  }
  return { headers, body };
}

/**
 * The text of an HTML mail body, with line breaks where blocks end.
 * DOMParser is safe for a stranger's HTML here: it builds an inert document (no scripts run,
 * no images or other resources load, nothing is attached to the page) and only its
 * textContent is used. That text later reaches the page as a textarea's value or as text
 * nodes, never as HTML.
 */
function htmlToText(html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  for (const el of doc.querySelectorAll("script, style, head")) el.remove();
  for (const el of doc.querySelectorAll("br")) el.replaceWith("\n");
  for (const el of doc.querySelectorAll("p, div, tr, li, h1, h2, h3")) el.append("\n");
  return (doc.body?.textContent || "").replace(/\n{3,}/g, "\n\n");
}

/**
 * The readable text of one MIME entity: {text, html} (null when it has none). In a multipart,
 * a plain-text part wins over an HTML one; attachments and non-text parts are skipped; the
 * nesting depth is capped so a crafted file cannot recurse without end.
 */
function bodyText(headers, body, depth = 0) {
  const ctype = headers["content-type"] || "text/plain";
  const type = ctype.split(";")[0].trim().toLowerCase();
  if (/^attachment/i.test(headers["content-disposition"] || "")) return null;
  if (type.startsWith("multipart/")) {
    const boundary = headerParam(ctype, "boundary");
    if (!boundary || depth > 5) return null;
    const parts = [];
    let part = null;
    for (const line of body.split(/\r?\n/)) {
      if (line.trimEnd() === `--${boundary}--`) break;
      if (line.trimEnd() === `--${boundary}`) {
        if (part) parts.push(part.join("\n"));
        part = [];
      } else if (part) part.push(line);
    }
    if (part) parts.push(part.join("\n"));
    const found = parts.map((p) => {
      const s = splitMessage(p);
      return bodyText(s.headers, s.body, depth + 1);
    }).filter(Boolean);
    return found.find((f) => !f.html) || found[0] || null;
  }
  if (!type.startsWith("text/")) return null;
  const encoding = (headers["content-transfer-encoding"] || "").toLowerCase();
  let raw = body;
  if (encoding === "base64") {
    try { raw = atob(body.replace(/\s+/g, "")); } catch { raw = body; }
  } else if (encoding === "quoted-printable") {
    raw = body.replace(/=\r?\n/g, "").replace(/=([0-9A-Fa-f]{2})/g, (x, hex) => String.fromCharCode(parseInt(hex, 16)));
  }
  const text = decodeText(bytesOf(raw), headerParam(ctype, "charset"));
  return type === "text/html" ? { text: htmlToText(text), html: true } : { text, html: false };
}

/** An .eml file (as a binary string) -> {text, from, subject, date (YYYY-MM-DD or null)}. */
export function parseEml(binary) {
  const { headers, body } = splitMessage(binary);
  const found = bodyText(headers, body);
  const sent = headers.date ? new Date(headers.date.replace(/\s*\([^)]*\)\s*$/, "")) : null;
  return {
    text: (found ? found.text : decodeText(bytesOf(body))).replace(/\r\n?/g, "\n").trim(),
    from: headers.from ? decodeHeader(headers.from) : "",
    subject: headers.subject ? decodeHeader(headers.subject) : "",
    date: sent && !Number.isNaN(sent.getTime()) ? isoDate(sent) : null,
  };
}

/** "eml", "txt", or null for a file the page does not read; by the name's extension, else its type. */
export function messageFileKind(file) {
  const ext = /\.([^.]+)$/.exec(file.name)?.[1]?.toLowerCase() || "";
  if (ext === "eml" || file.type === "message/rfc822") return "eml";
  return ext === "txt" || (ext === "" && file.type === "text/plain") ? "txt" : null;
}

/** A File of that kind -> {text, mail: parseEml()'s answer for an .eml, null for a .txt}. */
export async function readMessageFile(file, kind) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  if (kind === "eml") {
    const mail = parseEml(binaryString(bytes));
    return { text: mail.text, mail };
  }
  return { text: decodeText(bytes).replace(/\r\n?/g, "\n").trim(), mail: null };
}
