// Command labpod is what the lab's container images run on the real node,
// one static binary for every role:
//
//	labpod pause                  the pod sandbox's process: waits for SIGTERM
//	labpod serve [-listen :8080]  an HTTP backend that answers with its pod's name
//
// It is built and packed into images by the lab (lab/realnode), never
// shipped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: labpod pause | serve [-listen ADDR]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch os.Args[1] {
	case "pause":
		<-ctx.Done()
	case "serve":
		err = serve(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown role %q: want pause or serve", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "labpod:", err)
		os.Exit(1)
	}
}

// serve answers every request with the pod's name (POD_NAME, else the
// hostname) until ctx ends, then drains for up to 5 s.
func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "address to serve HTTP on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s\n", name)
		})}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
