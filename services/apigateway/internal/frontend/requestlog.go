package frontend

import (
	"context"
	"log/slog"
	"time"

	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
)

// requestLog is what the one log line of a request says beyond what
// ServeHTTP knows itself: who made it (once authenticated) and the flow
// schema that classified it (once flow control did). The request's
// context carries it while the request is served, only when the line is
// logged at all.
type requestLog struct {
	user, flowSchemaUID, priorityLevelUID string
}

type requestLogKey struct{}

// withRequestLog returns ctx carrying a new requestLog when logger logs
// at level, else ctx and nil.
func withRequestLog(ctx context.Context, logger *slog.Logger, level slog.Level) (context.Context, *requestLog) {
	if !logger.Enabled(ctx, level) {
		return ctx, nil
	}
	rl := &requestLog{}
	return context.WithValue(ctx, requestLogKey{}, rl), rl
}

// noteUser records the request's user for its log line.
func noteUser(ctx context.Context, user string) {
	if rl, _ := ctx.Value(requestLogKey{}).(*requestLog); rl != nil {
		rl.user = user
	}
}

// noteFlowSchema records what classified the request for its log line.
func noteFlowSchema(ctx context.Context, flowSchemaUID, priorityLevelUID string) {
	if rl, _ := ctx.Value(requestLogKey{}).(*requestLog); rl != nil {
		rl.flowSchemaUID, rl.priorityLevelUID = flowSchemaUID, priorityLevelUID
	}
}

// logRequest logs the request's line (with its trace_id and span_id when
// it was traced: lib/telemetry's logger): audit id, user, verb, what it
// addressed, the response code, the latency and the flow schema. Nothing
// the request sent (its body, its credentials) is logged.
func (h *Handler) logRequest(ctx context.Context, rl *requestLog, auditID, verb string, info requestinfo.Info, code int, took time.Duration) {
	h.cfg.Logger.LogAttrs(ctx, h.requestLogLevel(), "request",
		slog.String("audit_id", auditID),
		slog.String("user", rl.user),
		slog.String("verb", verb),
		slog.String("resource", info.Resource),
		slog.String("subresource", info.Subresource),
		slog.String("namespace", info.Namespace),
		slog.String("name", info.Name),
		slog.String("path", info.Path),
		slog.Int("code", code),
		slog.Duration("latency", took),
		slog.String("flow_schema_uid", rl.flowSchemaUID),
		slog.String("priority_level_uid", rl.priorityLevelUID),
	)
}

// requestLogLevel is Config.RequestLogLevel's level; debug when unset.
func (h *Handler) requestLogLevel() slog.Level {
	if h.cfg.RequestLogLevel == nil {
		return slog.LevelDebug
	}
	return h.cfg.RequestLogLevel.Level()
}
