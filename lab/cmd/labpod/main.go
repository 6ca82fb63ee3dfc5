// Command labpod is what the lab's container images run on the real node,
// one static binary for every role:
//
//	labpod pause                  the pod sandbox's process: waits for SIGTERM
//	labpod serve [-listen :8080]  an HTTP backend that answers with its pod's name
//	labpod client -target HOST:PORT [-interval 200ms] [-listen :8081]
//	                              a pooled keep-alive client (lab/keepalive) of
//	                              target; its log as JSON at GET /log, and each
//	                              change of outcome on stdout
//
// It is built and packed into images by the lab (lab/realnode), never
// shipped.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ghostwatch/ghostwatch/lab/keepalive"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: labpod pause | serve [-listen ADDR] | client -target HOST:PORT [-interval D] [-listen ADDR]")
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
	case "client":
		err = client(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown role %q: want pause, serve or client", os.Args[1])
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

// client runs a keep-alive client of -target until ctx ends, and serves
// its log at GET /log.
func client(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	target := fs.String("target", "", "HOST:PORT to send requests to (required)")
	interval := fs.Duration("interval", 200*time.Millisecond, "time between requests")
	listen := fs.String("listen", ":8081", "address to serve the log on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("client: -target is required")
	}
	// Each change of outcome is a line of the container's log (kubectl
	// logs), with when it came.
	last := ""
	k := &keepalive.Client{Host: *target, Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", *target)
	}, OnOutcome: func(o keepalive.Outcome) {
		if s := o.String(); s != last {
			fmt.Printf("%s %s\n", o.At.UTC().Format("15:04:05.000"), s)
			last = s
		}
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /log", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(k.Log())
	})
	// Ready once it listens: the probe needs no answer from the target.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	go k.Run(ctx, *interval)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return srv.Close()
}
