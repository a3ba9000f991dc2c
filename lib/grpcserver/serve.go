package grpcserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"google.golang.org/grpc"
)

// Serve serves srv on lis until srv stops, as each service's App.Serve
// does: it logs "<service> serving" with lis's address and attrs (on
// logger, or slog.Default() when nil), returns nil once srv was stopped
// (Stop or GracefulStop, which the App's Close calls) and any other error
// of srv.Serve prefixed with the service's name.
func Serve(srv *grpc.Server, lis net.Listener, service string, logger *slog.Logger, attrs ...any) error {
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info(service+" serving", append([]any{"addr", lis.Addr().String()}, attrs...)...)
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("%s: serve: %w", service, err)
	}
	return nil
}
