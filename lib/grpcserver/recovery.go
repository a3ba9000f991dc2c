package grpcserver

import (
	"context"
	"log/slog"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unaryRecovery turns a panic in the handler into codes.Internal and logs it
// with its stack. The panic value is not sent to the client: it may hold
// request data or internals.
//
// Only panics on the handler's goroutine are recovered; a handler that
// starts goroutines must recover in them itself.
func unaryRecovery(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(ctx, logger, info.FullMethod, r)
				resp = nil
			}
		}()
		return handler(ctx, req)
	}
}

// streamRecovery is unaryRecovery for streaming calls.
func streamRecovery(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(ss.Context(), logger, info.FullMethod, r)
			}
		}()
		return handler(srv, ss)
	}
}

func panicError(ctx context.Context, logger *slog.Logger, method string, r any) error {
	logger.ErrorContext(ctx, "grpc handler panicked",
		"method", method,
		"panic", r,
		"stack", string(debug.Stack()),
	)
	return status.Error(codes.Internal, "internal error: the handler panicked; see the server log")
}
