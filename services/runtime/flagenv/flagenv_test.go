package flagenv

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantDur time.Duration
		wantErr bool
	}{
		{name: "defaults", want: "./data", wantDur: time.Second},
		{name: "env", env: map[string]string{"BATON_T_DATA_DIR": "/env", "BATON_T_WAIT": "3s"}, want: "/env", wantDur: 3 * time.Second},
		{name: "flag wins", args: []string{"--data-dir=/flag"}, env: map[string]string{"BATON_T_DATA_DIR": "/env"}, want: "/flag", wantDur: time.Second},
		{name: "bad env", env: map[string]string{"BATON_T_WAIT": "soon"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			dir := fs.String("data-dir", "./data", "")
			wait := fs.Duration("wait", time.Second, "")
			err := Parse(fs, "BATON_T", tt.args, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if *dir != tt.want || *wait != tt.wantDur {
				t.Fatalf("got %q %v, want %q %v", *dir, *wait, tt.want, tt.wantDur)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	if got, want := EnvName("BATON_QUEUE", "data-dir"), "BATON_QUEUE_DATA_DIR"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
