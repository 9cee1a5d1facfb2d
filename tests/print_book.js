// The printed book's pages, made in the single-page build before Chromium prints it
// (tests/print_pdf.py adds this script to the page and calls window.attnlabPrint's functions).
//
// Everything here works from the rendered HTML, not from the chapters' sources:
// - an *answer* is a solution of sphinx-exercise (div.solution: static `solution` directives and
//   gated `solution-start`/`solution-end` alike) or an admonition titled "What happens...";
// - a *part* starts at the first chapter of a part of _toc.yml, whose place on the single page
//   Sphinx marks with <span id="document-DOCNAME">;
// - the headings are the h1-h4 of the chapters' sections.
window.attnlabPrint = (() => {
  const main = () => document.querySelector('main');
  const titleOf = el => ((el.querySelector(':scope > .admonition-title') || {}).textContent || '').trim();
  const before = (a, b) => Boolean(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
  const HEADINGS = 'section > h1, section > h2, section > h3, section > h4';

  // The outermost answers of the page, in reading order.
  function answers() {
    const found = Array.from(main().querySelectorAll('div.solution, div.admonition')).filter(
      el => el.classList.contains('solution') || /^what happens\b/i.test(titleOf(el)));
    found.forEach(el => el.classList.add('attnlab-answer'));
    return found.filter(el => !el.parentElement.closest('.attnlab-answer'));
  }

  // A heading's text with each typeset formula as \(TeX\) (the PDF's bookmarks turn it into text).
  function textWithTex(heading) {
    const tex = new Map(MathJax.startup.document.getMathItemsWithin([heading])
      .map(item => [item.typesetRoot, item.math]));
    const walk = node => {
      if (node.nodeType === Node.TEXT_NODE) return node.textContent;
      if (node.nodeType !== Node.ELEMENT_NODE || node.matches('a.headerlink')) return '';
      if (tex.has(node)) return '\\(' + tex.get(node) + '\\)';
      return Array.from(node.childNodes).map(walk).join('');
    };
    return walk(heading).replace(/\s+/g, ' ').trim();
  }

  // Mark where each part begins: a part title before the first of its chapters on the page.
  // `parts` is [{caption, docs: [docname, ...]}, ...]; returns the number of parts marked.
  function markParts(parts) {
    parts.forEach((part, i) => {
      const first = part.docs.map(d => document.getElementById('document-' + d)).find(Boolean);
      if (!first) return;
      const block = document.createElement('div');
      block.className = 'attnlab-print-part';
      block.id = 'attnlab-part-' + i;
      block.dataset.caption = part.caption;
      const title = document.createElement('p');
      title.className = 'attnlab-print-part-title';
      title.textContent = part.caption;
      block.appendChild(title);
      first.parentElement.insertBefore(block, first);
    });
    return document.querySelectorAll('.attnlab-print-part').length;
  }

  // The leader's edition: every answer moves to "Answers" at the end of its part; where it was,
  // a line links to it, and above it a line links back. Returns the number of answers moved.
  function gatherAnswers() {
    const blocks = Array.from(document.querySelectorAll('.attnlab-print-part'));
    const headings = Array.from(main().querySelectorAll(HEADINGS));
    const groups = new Map();
    for (const answer of answers()) {
      const part = blocks.filter(b => before(b, answer)).length - 1;
      if (part < 0) continue;  // before the first part: it stays where it is
      if (!groups.has(part)) groups.set(part, []);
      groups.get(part).push(answer);
    }
    let moved = 0;
    for (const [part, list] of groups) {
      const caption = blocks[part].dataset.caption;
      const section = document.createElement('section');
      section.className = 'attnlab-answers';
      section.id = 'attnlab-answers-' + part;
      const title = document.createElement('p');
      title.className = 'attnlab-answers-title';
      title.textContent = 'Answers · ' + caption;
      section.appendChild(title);
      list.forEach((answer, k) => {
        const label = titleOf(answer).replace(/\s+/g, ' ') || 'Answer';
        const heading = headings.filter(h => before(h, answer)).pop();
        answer.id = answer.id || `attnlab-answer-${part}-${k}`;
        const stub = document.createElement('p');
        stub.className = 'attnlab-answer-moved';
        stub.id = `attnlab-question-${part}-${k}`;
        const there = document.createElement('a');
        there.href = '#' + answer.id;
        there.textContent = `${label}: in the answers at the end of this part`;
        stub.appendChild(there);
        answer.parentElement.insertBefore(stub, answer);
        const entry = document.createElement('div');
        entry.className = 'attnlab-answer-entry';
        const from = document.createElement('p');
        from.className = 'attnlab-answer-from';
        const back = document.createElement('a');
        back.href = '#' + stub.id;
        back.textContent = 'From ' + (heading ? textOfHeading(heading) : caption);
        from.appendChild(back);
        entry.appendChild(from);
        entry.appendChild(answer);
        section.appendChild(entry);
        moved += 1;
      });
      const next = blocks[part + 1];
      if (next) next.parentElement.insertBefore(section, next);
      else blocks[part].parentElement.appendChild(section);
    }
    return moved;
  }

  const textOfHeading = h => {
    const copy = h.cloneNode(true);
    copy.querySelectorAll('a.headerlink').forEach(a => a.remove());
    return copy.textContent.replace(/\s+/g, ' ').trim();
  };

  // The participants' edition: no answer is printed, nor the lines that pointed to them.
  // Returns the number of answers removed.
  function dropAnswers() {
    const found = answers();
    document.querySelectorAll('.attnlab-answers, .attnlab-answer-moved').forEach(el => el.remove());
    found.forEach(el => el.remove());
    return found.length;
  }

  // The title page: the book's title, the edition, and which book this is (version, date, commit,
  // from the page footer's data attributes, _ext/build_info.py). Returns those three values.
  function titlePage(edition, note) {
    const build = document.querySelector('.attnlab-build');
    if (!build) throw new Error('no .attnlab-build footer on the page: rebuild the book');
    const info = {version: build.dataset.version, date: build.dataset.date, commit: build.dataset.commit};
    document.querySelectorAll('.attnlab-print-title').forEach(el => el.remove());
    const page = document.createElement('div');
    page.className = 'attnlab-print-title';
    const line = (cls, text) => {
      const p = document.createElement('p');
      p.className = cls;
      p.textContent = text;
      page.appendChild(p);
    };
    const book = main().querySelector('section > h1');
    line('attnlab-print-title-book', book ? textOfHeading(book) : document.title);
    line('attnlab-print-title-edition', edition);
    line('attnlab-print-title-note', note);
    const commit = info.commit === 'unknown' ? 'an unknown commit' : 'commit ' + info.commit;
    line('attnlab-print-title-build', `Version ${info.version} · built ${info.date} from ${commit}`);
    const first = main().querySelector('section[id]');
    first.parentElement.insertBefore(page, first);
    return info;
  }

  // The contents, after the title page: every part, chapter, section and subsection, linked, with
  // an empty box of fixed width for its page number (filled in by pageNumbers, so that filling
  // it moves nothing). Returns the entries as {id, depth, title}: depth 0 for a part (and for
  // the front matter's title), 1 for a chapter, 2 and 3 for its sections; title with \(TeX\).
  function contents() {
    document.querySelectorAll('nav.attnlab-print-contents').forEach(el => el.remove());
    const selector = 'span[id^="document-"], .attnlab-print-part, .attnlab-answers-title, ' + HEADINGS;
    const entries = [];
    let docStart = true, docLevel = 1, inPart = false;
    for (const el of main().querySelectorAll(selector)) {
      if (el.matches('span[id^="document-"]')) { docStart = true; continue; }
      if (el.closest('.attnlab-answer')) continue;
      if (el.matches('.attnlab-print-part')) {
        inPart = true;
        entries.push({el, id: el.id, depth: 0, title: el.dataset.caption});
        continue;
      }
      if (el.matches('.attnlab-answers-title')) {
        el.id = el.parentElement.id + '-title';
        entries.push({el, id: el.id, depth: 1, title: el.textContent.trim()});
        continue;
      }
      const level = Number(el.tagName.slice(1));
      if (docStart) { docLevel = level; docStart = false; }
      el.id = el.id || 'attnlab-h-' + entries.length;
      entries.push({el, id: el.id, depth: (inPart ? 1 : 0) + Math.max(0, level - docLevel),
                    title: textWithTex(el)});
    }
    const nav = document.createElement('nav');
    nav.className = 'attnlab-print-contents';
    nav.innerHTML = '<p class="attnlab-print-contents-title">Contents</p>';
    const list = document.createElement('ol');
    for (const entry of entries) {
      const item = document.createElement('li');
      item.className = 'attnlab-toc-' + entry.depth;
      const link = document.createElement('a');
      link.href = '#' + entry.id;
      const text = document.createElement('span');
      text.className = 'attnlab-toc-text';
      const source = entry.el.matches('.attnlab-print-part') ? entry.el.firstChild : entry.el;
      const copy = source.cloneNode(true);
      copy.querySelectorAll('a.headerlink').forEach(a => a.remove());
      text.append(...copy.childNodes);
      const number = document.createElement('span');
      number.className = 'attnlab-toc-page';
      number.dataset.target = entry.id;
      link.append(text, number);
      item.appendChild(link);
      list.appendChild(item);
    }
    nav.appendChild(list);
    const title = document.querySelector('.attnlab-print-title');
    title.parentElement.insertBefore(nav, title.nextSibling);
    return entries.map(({id, depth, title}) => ({id, depth, title}));
  }

  // Write each entry's page number ({id: number}) into the contents.
  function pageNumbers(numbers) {
    for (const box of document.querySelectorAll('.attnlab-toc-page')) {
      box.textContent = numbers[box.dataset.target] ?? '';
    }
  }

  return {answers: () => answers().length, markParts, gatherAnswers, dropAnswers, titlePage,
          contents, pageNumbers};
})();
