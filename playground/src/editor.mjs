// The runbook editor: CodeMirror 6 with YAML and JSON highlighting, and the module's lint findings as inline
// diagnostics (an underline from the finding's line and column, its message on hover, a mark in the gutter).
// The findings themselves come from the policy component (app.mjs calls `lint`); this file only places them.

import { Annotation, Compartment, EditorState } from '@codemirror/state';
import { drawSelection, EditorView, highlightActiveLine, highlightActiveLineGutter, highlightSpecialChars, keymap, lineNumbers } from '@codemirror/view';
import { defaultKeymap, history, historyKeymap } from '@codemirror/commands';
import { bracketMatching, defaultHighlightStyle, syntaxHighlighting } from '@codemirror/language';
import { json } from '@codemirror/lang-json';
import { yaml } from '@codemirror/lang-yaml';
import { lintGutter, lintKeymap, setDiagnostics } from '@codemirror/lint';

/** Marks the page's own replacements of the text (an example, a link), which are not edits. */
const replacing = Annotation.define();

/** JSON when the document opens with `{` or `[`, YAML otherwise (YAML is a superset of JSON anyway). */
export function languageOf(text) {
  return /^\s*[[{]/.test(text) ? 'json' : 'yaml';
}

/** The offset of 1-based (line, column in Unicode scalar values) in `state`, clamped to the document. */
export function offsetOf(state, line, column) {
  const ln = state.doc.line(Math.min(Math.max(line, 1), state.doc.lines));
  const chars = Array.from(ln.text);
  return ln.from + chars.slice(0, Math.max(0, Math.min(column - 1, chars.length))).join('').length;
}

/** 1-based line and column (Unicode scalar values) of `pos`. */
export function lineColumn(state, pos) {
  const ln = state.doc.lineAt(pos);
  return { line: ln.number, column: Array.from(ln.text.slice(0, pos - ln.from)).length + 1 };
}

/**
 * A finding as a CodeMirror diagnostic: from its column to the end of the token there (a key, a scalar, a
 * quoted string), a zero-width point where the column is past the text.
 */
export function diagnosticOf(state, f) {
  const from = offsetOf(state, f.line, f.column);
  const rest = state.doc.lineAt(from).text.slice(from - state.doc.lineAt(from).from);
  const token = /^"(?:[^"\\]|\\.)*"?|^'(?:[^']|'')*'?|^[^\s,:\]}#]+|^\S/.exec(rest);
  return {
    from,
    to: from + (token ? token[0].length : 0),
    severity: f.severity === 'error' ? 'error' : 'warning',
    source: `${f.code} at ${f.pointer || '/'}, line ${f.line}, column ${f.column}`,
    message: f.message,
  };
}

/**
 * Makes the editor in `parent`. `onChange(text)` after each edit of the text, `onCaret()` after each move.
 * `contentAttributes` go on the editable element (its id, its label).
 */
export function createEditor(parent, { onChange, onCaret, contentAttributes }) {
  const language = new Compartment();
  let current = 'yaml';
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: '',
      extensions: [
        lineNumbers(),
        lintGutter(),
        highlightActiveLineGutter(),
        highlightSpecialChars(),
        history(),
        drawSelection(),
        bracketMatching(),
        highlightActiveLine(),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        language.of(yaml()),
        keymap.of([...defaultKeymap, ...historyKeymap, ...lintKeymap]),
        EditorState.tabSize.of(8),
        EditorView.contentAttributes.of({ spellcheck: 'false', autocorrect: 'off', autocapitalize: 'off', ...contentAttributes }),
        EditorView.updateListener.of((u) => {
          if (u.docChanged) {
            const text = u.state.doc.toString();
            const want = languageOf(text);
            if (want !== current) {
              current = want;
              queueMicrotask(() => view.dispatch({ effects: language.reconfigure(want === 'json' ? json() : yaml()) }));
            }
            if (!u.transactions.some((t) => t.annotation(replacing))) onChange?.(text);
          }
          if (u.selectionSet || u.docChanged || u.focusChanged) onCaret?.();
        }),
      ],
    }),
  });
  return {
    view,
    get text() {
      return view.state.doc.toString();
    },
    get language() {
      return current;
    },
    /** Replaces the whole text (an example, a link), caret at the start, scrolled to the top. */
    replace(text) {
      current = languageOf(text);
      view.dispatch({
        changes: { from: 0, to: view.state.doc.length, insert: text },
        selection: { anchor: 0 },
        effects: [language.reconfigure(current === 'json' ? json() : yaml()), EditorView.scrollIntoView(0, { y: 'start' })],
        annotations: replacing.of(true),
      });
    },
    /** Shows `findings` (the module's, for the current text) as diagnostics. */
    setFindings(findings) {
      view.dispatch(setDiagnostics(view.state, findings.map((f) => diagnosticOf(view.state, f))));
    },
    /** The 1-based line and column of the caret. */
    caret() {
      return lineColumn(view.state, view.state.selection.main.head);
    },
    jumpTo(line, column) {
      const pos = offsetOf(view.state, line, column);
      view.dispatch({ selection: { anchor: pos }, effects: EditorView.scrollIntoView(pos, { y: 'center' }) });
      view.focus();
    },
    focus() {
      view.focus();
    },
  };
}
