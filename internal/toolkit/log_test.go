package toolkit

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestLoggerFromEnv: LogEnv's levels, case-insensitive; unset is no logger;
// anything else an error that names the variable and the levels.
func TestLoggerFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want slog.Level // the lowest level it logs
		none bool
	}{
		{"", 0, true},
		{"debug", slog.LevelDebug, false},
		{"INFO", slog.LevelInfo, false},
		{"warn", slog.LevelWarn, false},
		{"warning", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
	} {
		t.Setenv(LogEnv, tc.v)
		l, err := LoggerFromEnv(&strings.Builder{})
		switch {
		case err != nil:
			t.Errorf("%q: %v", tc.v, err)
		case tc.none != (l == nil):
			t.Errorf("%q: logger %v, want none %v", tc.v, l, tc.none)
		case l != nil && (!l.Enabled(context.Background(), tc.want) || l.Enabled(context.Background(), tc.want-1)):
			t.Errorf("%q: does not log from %v up only", tc.v, tc.want)
		}
	}
	t.Setenv(LogEnv, "verbose")
	if _, err := LoggerFromEnv(&strings.Builder{}); err == nil || !strings.Contains(err.Error(), LogEnv) || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Errorf("verbose: %v, want an error naming %s and the levels", err, LogEnv)
	}
}
