package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestShutdownLetsRequestsCleanUp: a request still waiting when the
// drain ends has its context cancelled and finishes its cleanup before
// shutdown returns; one that answers within the drain answers.
func TestShutdownLetsRequestsCleanUp(t *testing.T) {
	requests, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	var inflight sync.WaitGroup
	started := make(chan string, 2)
	var mu sync.Mutex
	cleaned := false
	h := track(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- r.URL.Path
		if r.URL.Path == "/quick" {
			time.Sleep(100 * time.Millisecond) // answers within the drain
			w.WriteHeader(http.StatusCreated)
			return
		}
		<-r.Context().Done() // a create whose sandbox never gets ready
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		cleaned = true
		mu.Unlock()
	}), &inflight)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, BaseContext: func(net.Listener) context.Context { return requests }}
	go func() { _ = srv.Serve(ln) }()
	quick := make(chan int, 1)
	for _, path := range []string{"/slow", "/quick"} {
		go func() {
			resp, err := http.Get("http://" + ln.Addr().String() + path)
			if err == nil && path == "/quick" {
				quick <- resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	<-started
	<-started
	shutdown([]*http.Server{srv}, cancelRequests, &inflight, 500*time.Millisecond, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if !cleaned {
		t.Error("shutdown returned before the cancelled request cleaned up")
	}
	select {
	case code := <-quick:
		if code != http.StatusCreated {
			t.Errorf("the request answering within the drain got %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Error("the request answering within the drain got no answer")
	}
}
