package grpcserver

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// unaryLogging logs every call's method, code and duration at debug level.
// Request and response bodies are never logged: they may carry secrets.
func unaryLogging(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !logger.Enabled(ctx, slog.LevelDebug) {
			return handler(ctx, req)
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		logCall(ctx, logger, info.FullMethod, "unary", start, err)
		return resp, err
	}
}

// streamLogging is unaryLogging for streaming calls; it logs when the
// stream ends.
func streamLogging(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if !logger.Enabled(ctx, slog.LevelDebug) {
			return handler(srv, ss)
		}
		start := time.Now()
		err := handler(srv, ss)
		logCall(ctx, logger, info.FullMethod, "stream", start, err)
		return err
	}
}

func logCall(ctx context.Context, logger *slog.Logger, method, kind string, start time.Time, err error) {
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.String("type", kind),
		slog.String("code", status.Code(err).String()),
		slog.Duration("duration", time.Since(start)),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer", p.Addr.String()))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
	}
	logger.LogAttrs(ctx, slog.LevelDebug, "grpc call", attrs...)
}
