package suggest

import (
	"slices"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"get", "get", 0}, {"", "get", 3}, {"gt", "get", 1},
		{"stauts", "status", 1}, // a swap is one edit
		{"deploymnet", "deployment", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	commands := []string{"apply", "get", "delete", "describe", "queue", "watch", "status", "version", "scale", "rollout", "completion", "certs"}
	for _, tc := range []struct {
		word       string
		candidates []string
		want       []string
	}{
		{"gt", commands, []string{"get"}},
		{"stauts", commands, []string{"status"}},
		{"STATUS", commands, nil}, // itself, in another case
		{"desc", commands, []string{"describe"}},
		{"de", commands, []string{"delete", "describe"}},
		{"frobnicate", commands, nil},
		{"x", commands, nil},
		{"statz", []string{"stats", "status", "list"}, []string{"stats"}},
		{"statsu", []string{"stats", "status", "list"}, []string{"stats", "status"}},
		{"deploymnets", []string{"deployments", "deployment", "deploy", "pods"}, []string{"deployments", "deployment"}},
		{"pdo", []string{"pods", "pod", "po"}, []string{"po", "pod"}},
		{"", commands, nil},
	} {
		if got := Closest(tc.word, tc.candidates); !slices.Equal(got, tc.want) {
			t.Errorf("Closest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
	if got := Closest("a", []string{"b", "c", "d", "e", "f"}); len(got) > MaxSuggestions {
		t.Errorf("Closest returned %d, more than %d", len(got), MaxSuggestions)
	}
}

func TestPhrase(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{nil, ""}, {[]string{"get"}, "did you mean get?"}, {[]string{"stats", "status"}, "did you mean stats or status?"},
		{[]string{"a", "b", "c"}, "did you mean a, b or c?"},
	} {
		if got := Phrase(tc.words); got != tc.want {
			t.Errorf("Phrase(%q) = %q, want %q", tc.words, got, tc.want)
		}
	}
}
