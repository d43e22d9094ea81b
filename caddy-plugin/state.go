package weir

import (
	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/zapcore"

	"sync"
	"sync/atomic"
)

// pool keeps engines and inline zones alive across config reloads: a new config that names
// the same policy file with the same content, or the same zone with the same parameters,
// gets the same tables (and so the same counts). The last config to stop using one frees it.
var pool = newUsagePool()

// engineState is a pooled policy engine. mu guards the handle against Destruct while a
// request (from an old config still draining) is inside a cgo call.
type engineState struct {
	mu     sync.RWMutex
	eng    *engine
	source string
	// Queue timeouts per limit (ns) and the log level of its rejections, read once.
	timeouts  []uint64
	logLevels []zapcore.Level
}

// logLevel is the level limit i's rejections are logged at.
func (s *engineState) logLevel(i int) zapcore.Level {
	if i >= 0 && i < len(s.logLevels) {
		return s.logLevels[i]
	}
	return zapcore.ErrorLevel
}

// Destruct implements caddy.Destructor.
func (s *engineState) Destruct() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eng != nil {
		s.eng.free()
		s.eng = nil
	}
	return nil
}

// zoneState is a pooled inline zone.
type zoneState struct {
	mu     sync.RWMutex
	z      *zone
	name   string
	params zoneParams

	passed, rejected, queued, timedOut atomic.Uint64

	// Concurrency queues: waiting requests per key (bounded by the zone's queue).
	qmu     sync.Mutex
	waiting map[string]int
}

// Destruct implements caddy.Destructor.
func (s *zoneState) Destruct() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.z != nil {
		s.z.free()
		s.z = nil
	}
	return nil
}

// enqueue takes a queue place for key if fewer than max are waiting.
func (s *zoneState) enqueue(key string, max int) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.waiting == nil {
		s.waiting = map[string]int{}
	}
	if s.waiting[key] >= max {
		return false
	}
	s.waiting[key]++
	return true
}

func (s *zoneState) dequeue(key string) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.waiting[key] <= 1 {
		delete(s.waiting, key)
	} else {
		s.waiting[key]--
	}
}

func newUsagePool() *caddyUsagePool { return caddy.NewUsagePool() }

type caddyUsagePool = caddy.UsagePool
