// Reference encoder for tests/tokenizer: encodes each file named on the command line with the
// npm package gpt-3-encoder and prints one JSON array of token ids per file, one per line.
//   node encode.js <gpt-3-encoder package dir> <file>...
// Files are read as UTF-8 (invalid bytes would become U+FFFD, so the test passes valid UTF-8).
//
// The package's encode() appends with Array.concat, quadratic in the text length (about 50 s
// for a 240 KB file), so a long text is encoded in chunks cut just before a '\n' whose previous
// character is not whitespace. Such a cut never changes the result: the pre-tokenisation regex
// has a match boundary there (a run of letters, digits or symbols ends before the '\n', and a
// contraction ends in a letter), no match left of it looks past it (only whitespace runs look
// ahead), and matching from the cut on looks only to the right.
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2]));
const CHUNK = 4096;
function encodeLong(text) {
  const out = [];
  let start = 0;
  while (start < text.length) {
    let cut = text.length;
    if (text.length - start > CHUNK) {
      cut = -1;
      for (let p = start + CHUNK; p < text.length; p++) {
        if (text[p] === '\n' && !/\s/u.test(text[p - 1])) {
          cut = p;
          break;
        }
      }
      if (cut < 0) cut = text.length;
    }
    for (const t of encode(text.slice(start, cut))) out.push(t);
    start = cut;
  }
  return out;
}
for (const f of process.argv.slice(3)) {
  process.stdout.write(JSON.stringify(encodeLong(fs.readFileSync(f, 'utf-8'))) + '\n');
}
