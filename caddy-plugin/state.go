package weir

import (
	"sync"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/zapcore"
)

// pool keeps engines alive across config reloads: a new config that names the same policy
// file with the same content, or the same inline zones with the same parameters, gets the
// same engine (and so the same counts). The last config to stop using one frees it. Another
// content gets a new engine over the regions of the zones it kept (regions.go).
var pool = caddy.NewUsagePool()

// engineState is a pooled engine: a policy file's or a handler's inline zones'. mu guards the
// handle against Destruct while a request (from an old config still draining) is inside a
// cgo call.
type engineState struct {
	mu     sync.RWMutex
	eng    *engine
	source string
	// held: the pooled regions the engine is attached to, given back once it is freed.
	held *engineRegions
	// Per limit, read once: the name Caddy shows (logs, placeholders, metrics) and the level
	// its rejections are logged at.
	names     []string
	logLevels []zapcore.Level
	// renew keeps the engine's permits counted while their requests run (renew.go).
	renew *renewer
	// waiters are the requests waiting in its queues, woken when permits go back (handover.go).
	waiters waiters
}

// lifo reports whether t's queue serves its newest waiter first (false once the engine is
// gone).
func (s *engineState) lifo(t *ticket) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.eng != nil && s.eng.queueLifo(t, nowNS())
}

// newEngineState wraps eng, attached to the regions held; names are its limits' names as
// Caddy shows them.
func newEngineState(eng *engine, held *engineRegions, source string, names []string) *engineState {
	s := &engineState{eng: eng, held: held, source: source, names: names}
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
		if s.held != nil {
			s.held.release()
		}
	}
}
