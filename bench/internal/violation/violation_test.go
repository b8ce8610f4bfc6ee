package violation

import "testing"

func TestChecker(t *testing.T) {
	type ev struct{ op, key, worker string }
	for _, tc := range []struct {
		name   string
		events []ev
		want   Counts
		change int
	}{
		{"clean cycle", []ev{{"add", "a", ""}, {"lease", "a", "w1"}, {"ack", "a", "w1"}}, Counts{}, 0},
		{"change while leased, redelivered once", []ev{{"add", "a", ""}, {"lease", "a", "w1"}, {"add", "a", ""}, {"ack", "a", "w1"}, {"lease", "a", "w2"}, {"ack", "a", "w2"}}, Counts{}, 1},
		{"change while leased, never redelivered", []ev{{"add", "a", ""}, {"lease", "a", "w1"}, {"add", "a", ""}, {"ack", "a", "w1"}}, Counts{Lost: 1}, 1},
		{"change while leased, delivered to a second worker at once", []ev{{"add", "a", ""}, {"lease", "a", "w1"}, {"add", "a", ""}, {"lease", "a", "w2"}, {"ack", "a", "w1"}, {"ack", "a", "w2"}}, Counts{Concurrent: 1}, 1},
		{"delivered twice", []ev{{"add", "a", ""}, {"lease", "a", "w1"}, {"ack", "a", "w1"}, {"lease", "a", "w1"}, {"ack", "a", "w1"}}, Counts{Unexpected: 1}, 0},
		{"collapsed announcements owe one delivery", []ev{{"add", "a", ""}, {"add", "a", ""}, {"lease", "a", "w1"}, {"ack", "a", "w1"}}, Counts{}, 0},
		{"never delivered", []ev{{"add", "a", ""}}, Counts{Lost: 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New()
			for _, e := range tc.events {
				switch e.op {
				case "add":
					c.Announced(e.key)
				case "lease":
					c.Delivered(e.key, e.worker)
				case "ack":
					c.Acked(e.key, e.worker)
				}
			}
			if got := c.Finish(); got != tc.want {
				t.Errorf("counts %+v, want %+v", got, tc.want)
			}
			if got := c.Events(); got != tc.change {
				t.Errorf("%d change-while-leased events, want %d", got, tc.change)
			}
		})
	}
}
