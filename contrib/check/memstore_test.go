package main

// Series in memory for Prometheus's query engine: what the alert and dashboard tests query.

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// memStore loads series written one a line in the notation of Prometheus's rule unit tests,
// `name{labels} 0+10x60` (`a+bxn`: a, then n more each b apart; `_` for a missing sample),
// one sample a minute from time 0.
func memStore(t *testing.T, text string) storage.Queryable {
	t.Helper()
	var all []storage.Series
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		lset, values, err := promqlParser.ParseSeriesDesc(line)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var samples []chunks.Sample
		for i, v := range values {
			if !v.Omitted {
				samples = append(samples, floatSample{(time.Duration(i) * time.Minute).Milliseconds(), v.Value})
			}
		}
		all = append(all, storage.NewListSeries(lset, samples))
	}
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			out := &seriesList{}
			for _, s := range all {
				if matchesAll(s.Labels(), ms) {
					out.series = append(out.series, s)
				}
			}
			return out
		},
	}}
}

func matchesAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

// seriesList is a storage.SeriesSet over series in memory.
type seriesList struct {
	series []storage.Series
	next   int
}

func (l *seriesList) Next() bool {
	l.next++
	return l.next <= len(l.series)
}

func (l *seriesList) At() storage.Series                { return l.series[l.next-1] }
func (l *seriesList) Err() error                        { return nil }
func (l *seriesList) Warnings() annotations.Annotations { return nil }

// floatSample is a chunks.Sample of a float series.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }

func newEngine() *promql.Engine {
	return promql.NewEngine(promql.EngineOpts{
		MaxSamples:    1_000_000,
		Timeout:       time.Minute,
		LookbackDelta: 5 * time.Minute,
	})
}
