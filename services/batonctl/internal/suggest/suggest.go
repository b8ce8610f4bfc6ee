// Package suggest finds the words a mistyped one was probably meant to be,
// for batonctl's "did you mean" on an unknown command, subcommand or
// resource: the candidates within a small edit distance, or that begin
// with what was typed.
//
//	suggest.Closest("stauts", []string{"status", "stats", "get"}) // ["status"]
package suggest

import (
	"sort"
	"strings"
)

// MaxSuggestions bounds how many words Closest returns: more would read as
// a list of everything, which the error's own list already gives.
const MaxSuggestions = 3

// Closest returns the candidates word was probably meant to be, nearest
// first (then in alphabetical order), at most MaxSuggestions of them:
// those within Distance's reach of word (one edit for words of up to five
// letters, two for longer ones; a swap of two neighbouring letters counts
// as one edit) and, for words of two letters or more, those that begin
// with it. Case is ignored; word itself, and repeated candidates, are not
// returned.
func Closest(word string, candidates []string) []string {
	w := strings.ToLower(word)
	if w == "" {
		return nil
	}
	reach := 1
	if len([]rune(w)) > 5 {
		reach = 2
	}
	type scored struct {
		word string
		d    int
	}
	var found []scored
	seen := map[string]bool{}
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if lc == w || seen[lc] {
			continue
		}
		d := Distance(w, lc)
		switch {
		case d <= reach:
		case len(w) >= 2 && strings.HasPrefix(lc, w):
			d = reach + 1 // after the near misses
		default:
			continue
		}
		seen[lc] = true
		found = append(found, scored{c, d})
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].d != found[j].d {
			return found[i].d < found[j].d
		}
		return found[i].word < found[j].word
	})
	out := make([]string, 0, min(len(found), MaxSuggestions))
	for _, f := range found[:min(len(found), MaxSuggestions)] {
		out = append(out, f.word)
	}
	return out
}

// Distance is the optimal string alignment distance between a and b: the
// fewest insertions, deletions, substitutions and swaps of two adjacent
// letters that turn a into b, no letter edited twice. A swap counts as one
// edit because it is the commonest typo ("stauts"), which plain
// Levenshtein distance counts as two.
func Distance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// d[i][j] is the distance between s[:i] and t[:j].
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}

// Phrase words the suggestions for an error message: "did you mean get?"
// or "did you mean stats or status?"; "" when there are none.
func Phrase(words []string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return "did you mean " + words[0] + "?"
	}
	return "did you mean " + strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1] + "?"
}
