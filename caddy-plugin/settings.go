package weir

import (
	"fmt"

	"go.uber.org/zap/zapcore"
)

// maxZoneBytes is the largest inline zone table (1 TiB): a zone's table is allocated when the
// config loads, and a larger number is a typo, not a plan.
const maxZoneBytes = 1 << 40

// maxJSONInt is the largest whole number a Caddyfile setting may have: the Caddyfile adapter
// passes numbers through float64, exact up to 2^53.
const maxJSONInt = 1 << 53

// checkSize checks a zone's table size against the minimum its table needs and maxZoneBytes.
func checkSize(size int, min uint64) error {
	switch {
	case size <= 0:
		return fmt.Errorf("size must be a positive number of bytes, got %d", size)
	case uint64(size) < min:
		return fmt.Errorf("size %d is below the %d bytes the zone's table needs at least", size, min)
	case size > maxZoneBytes:
		return fmt.Errorf("size %d is too large: at most %d bytes (1 TiB)", size, maxZoneBytes)
	}
	return nil
}

// parseLogLevel maps a log_level (nginx's names, as in weir policies) to Caddy's log level:
// notice has no level of its own in Caddy's logger and logs at info.
func parseLogLevel(s string) (zapcore.Level, error) {
	switch s {
	case "info", "notice":
		return zapcore.InfoLevel, nil
	case "warn":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	return zapcore.InfoLevel, fmt.Errorf("unknown log_level %q; expected info, notice, warn or error", s)
}

// policyLogLevel maps weir_engine_limit_log_level's value (0 info, 1 notice, 2 warn, 3 error).
func policyLogLevel(v int) zapcore.Level {
	switch v {
	case 0, 1:
		return zapcore.InfoLevel
	case 2:
		return zapcore.WarnLevel
	}
	return zapcore.ErrorLevel
}

// engineLogLevel maps a valid log_level to weir_limit_spec.log_level (0 info, 1 notice,
// 2 warn, 3 error).
func engineLogLevel(s string) int {
	switch s {
	case "notice":
		return 1
	case "warn":
		return 2
	case "error":
		return 3
	}
	return 0
}
