package weir

import (
	"sync"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/zapcore"
)

// pool keeps engines alive across config reloads: a new config that names the same policy
// file with the same content, or the same inline zones with the same parameters, gets the
// same engine (and so the same counts). The last config to stop using one frees it.
var pool = caddy.NewUsagePool()

// engineState is a pooled engine: a policy file's or a handler's inline zones'. mu guards the
// handle against Destruct while a request (from an old config still draining) is inside a
// cgo call.
type engineState struct {
	mu     sync.RWMutex
	eng    *engine
	source string
	// freed runs after the engine is freed (inline zones: give back their regions).
	freed func()
	// regions: the pooled region of each of the engine's zones, by the engine's zone name
	// (inline zones; nil for a policy's own tables).
	regions map[string]string
	// Per limit, read once: the name Caddy shows (logs, placeholders, metrics) and the level
	// its rejections are logged at.
	names     []string
	logLevels []zapcore.Level
	// renew keeps the engine's permits counted while their requests run (renew.go).
	renew *renewer
}

// newEngineState wraps eng; names are its limits' names as Caddy shows them.
func newEngineState(eng *engine, source string, names []string) *engineState {
	s := &engineState{eng: eng, source: source, names: names}
	for i := range eng.limits {
		s.logLevels = append(s.logLevels, policyLogLevel(eng.logLevel(i)))
	}
	s.renew = startRenewer(s)
	return s
}

// name is limit i's name ("" for none, e.g. -1).
func (s *engineState) name(i int) string {
	if i >= 0 && i < len(s.names) {
		return s.names[i]
	}
	return ""
}

// logLevel is the level limit i's rejections are logged at.
func (s *engineState) logLevel(i int) zapcore.Level {
	if i >= 0 && i < len(s.logLevels) {
		return s.logLevels[i]
	}
	return zapcore.ErrorLevel
}

// Destruct implements caddy.Destructor: the engine's last counts go to the metrics, then it
// is freed.
func (s *engineState) Destruct() error {
	s.renew.halt()
	hub.retire(s)
	return nil
}

// freeEngine frees the engine (s.mu held for writing).
func (s *engineState) freeEngine() {
	if s.eng != nil {
		s.eng.free()
		s.eng = nil
		if s.freed != nil {
			s.freed()
		}
	}
}
