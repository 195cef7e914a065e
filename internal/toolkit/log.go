package toolkit

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// LogEnv names the environment variable that turns on the library's logs in
// every command (the tools' flags stay those of their C originals): debug,
// info, warn or error, written to stderr as text. Unset: silent.
const LogEnv = "SOFTROCE_LOG"

// Logger is the logger the tools give their devices, CM agents and sockets
// (nil: silent); the command sets it from LogEnv (LoggerFromEnv).
var Logger *slog.Logger

// LoggerFromEnv returns the logger LogEnv asks for, writing to w, or nil when
// it is unset; an unknown level is an error that says what to set.
func LoggerFromEnv(w io.Writer) (*slog.Logger, error) {
	v := os.Getenv(LogEnv)
	if v == "" {
		return nil, nil
	}
	var level slog.Level
	switch strings.ToLower(v) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("%s=%q: want debug, info, warn or error, or unset it", LogEnv, v)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
}
