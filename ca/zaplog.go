package ca

import (
	"context"
	"log/slog"
	"sort"

	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that hands certmagic's log entries to fleet's slog handler, as one
// "fleet.certmagic" event each, with certmagic's message and fields as attributes. certmagic's
// Debug and Info (every step of an issuance: "acquiring lock", …) become Debug; its warnings and
// errors stay warnings and errors. Our own events (root made, leaf issued) are logged by this
// package at Info.
type slogCore struct {
	h      slog.Handler
	fields []zapcore.Field
}

func newSlogCore(h slog.Handler) zapcore.Core { return &slogCore{h: h} }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.InfoLevel:
		return slog.LevelDebug
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	all := make([]zapcore.Field, 0, len(c.fields)+len(fields))
	all = append(append(all, c.fields...), fields...)
	return &slogCore{h: c.h, fields: all}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, slogLevel(e.Level), "fleet.certmagic", 0)
	r.AddAttrs(slog.String("message", e.Message))
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r.AddAttrs(slog.Any(k, enc.Fields[k]))
	}
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }
