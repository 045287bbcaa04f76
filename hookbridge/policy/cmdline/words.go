package cmdline

import (
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// literal is a word's value after quote removal, when it holds no
// expansion: no parameter, command or arithmetic substitution, no glob
// that could match files, no brace expansion.
func literal(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			v, ok := unquotedLit(p.Value)
			if !ok {
				return "", false
			}
			b.WriteString(v)
		case *syntax.SglQuoted:
			if !p.Dollar {
				b.WriteString(p.Value)
				continue
			}
			v, ok := ansiC(p.Value)
			if !ok {
				return "", false
			}
			b.WriteString(v)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescapeDouble(lit.Value))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unquotedLit removes the backslashes of an unquoted literal, and refuses
// one the shell would expand: a glob (*, ?, [...]) or braces ({a,b},
// {1..3}).
func unquotedLit(s string) (string, bool) {
	if !strings.ContainsAny(s, `\*?[{`) {
		return s, true
	}
	var b strings.Builder
	open := -1 // index in b of an unescaped [ or {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					b.WriteByte(s[i])
				}
			} else {
				b.WriteByte(c) // a backslash at the very end stays
			}
			continue
		case '*', '?':
			return "", false
		case '[', '{':
			if open < 0 {
				open = b.Len()
			}
		case ']':
			if open >= 0 {
				return "", false
			}
		case '}':
			if open >= 0 {
				inner := b.String()[open:]
				if strings.Contains(inner, ",") || strings.Contains(inner, "..") {
					return "", false
				}
			}
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// unescapeDouble removes the backslashes that quote something inside
// double quotes: before $ ` " \ and a newline.
func unescapeDouble(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ansiC decodes the escapes of a $'...' string; ok is false for one it
// does not know, which the caller then treats as unknown.
func ansiC(s string) (string, bool) {
	if !strings.Contains(s, `\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '\\', '\'', '"', '?':
			b.WriteByte(c)
		case 'x':
			j := i + 1
			for j < len(s) && j < i+3 && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				return "", false
			}
			n, _ := strconv.ParseUint(s[i+1:j], 16, 8)
			b.WriteByte(byte(n))
			i = j - 1
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(s[i:j], 8, 16)
			b.WriteByte(byte(n))
			i = j - 1
		default:
			return "", false // \u, \U, \c...: rare; unknown is safe
		}
	}
	return b.String(), true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// literalHeredoc is the body of a here-document when it holds no
// expansion. With a quoted delimiter (<<'EOF') the body is taken as it is;
// otherwise backslashes quote $ ` \ and newlines, as in double quotes.
func literalHeredoc(r *syntax.Redirect) (string, bool) {
	quoted := false
	if r.Word != nil {
		for _, p := range r.Word.Parts {
			switch p := p.(type) {
			case *syntax.SglQuoted, *syntax.DblQuoted:
				quoted = true
			case *syntax.Lit:
				quoted = quoted || strings.Contains(p.Value, `\`)
			}
		}
	}
	var b strings.Builder
	for _, part := range r.Hdoc.Parts {
		lit, ok := part.(*syntax.Lit)
		if !ok {
			return "", false
		}
		if quoted {
			b.WriteString(lit.Value)
		} else {
			b.WriteString(unescapeDouble(lit.Value))
		}
	}
	return b.String(), true
}

// quote writes s so that a shell would read it back as one word: as it is
// when it holds nothing special, else in single quotes.
func quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./=:@%+,-{}^", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// JoinArgv writes an argument vector as a command line that a shell reads
// back as the same words.
func JoinArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = quote(a)
	}
	return strings.Join(q, " ")
}
