// Command loadgen is the API benchmark's load generator: closed-loop clients on loopback.
//
// It reads a scenario (JSON, from the file named by -scenario) of weighted calls, each with
// concrete variants (URL, body, headers: one per user, page or id), runs -clients clients back
// to back for -seconds, and prints one JSON object: per call name and in aggregate, the count,
// failures, requests per second and latency percentiles (with -raw, every latency too, so that
// several short runs can be merged). A compiled client takes a small share
// of the two cores the server also runs on, so the figures say more about the server than a
// Python client's would.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

type variant struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Body    json.RawMessage   `json:"body,omitempty"`
	Headers map[string]string `json:"headers"`
}

type call struct {
	Name     string    `json:"name"`
	Weight   int       `json:"weight"`
	Expect   int       `json:"expect"`
	Variants []variant `json:"variants"`
}

type outcome struct {
	latency time.Duration
	failed  bool
	detail  string
}

type figures struct {
	Count     int     `json:"count"`
	Failures  int     `json:"failures"`
	Seconds   float64 `json:"seconds"`
	RPS       float64 `json:"rps"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	Latencies []int64 `json:"latencies_us,omitempty"`
}

func main() {
	scenarioPath := flag.String("scenario", "", "scenario JSON file")
	clients := flag.Int("clients", 16, "concurrent clients")
	seconds := flag.Float64("seconds", 20, "duration")
	rawLatencies := flag.Bool("raw", false, "also print every latency, in microseconds")
	flag.Parse()

	raw, err := os.ReadFile(*scenarioPath)
	if err != nil {
		fail(err)
	}
	var calls []call
	if err := json.Unmarshal(raw, &calls); err != nil {
		fail(err)
	}
	var wheel []int // call indexes, each repeated by its weight
	for i, c := range calls {
		if len(c.Variants) == 0 {
			fail(fmt.Errorf("call %q has no variants", c.Name))
		}
		for range c.Weight {
			wheel = append(wheel, i)
		}
	}
	if len(wheel) == 0 {
		fail(fmt.Errorf("no call has a weight"))
	}

	transport := &http.Transport{MaxIdleConnsPerHost: *clients, DisableCompression: true}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	results := make([][]outcome, len(calls))
	var mu sync.Mutex
	var wg sync.WaitGroup
	started := time.Now()
	deadline := started.Add(time.Duration(*seconds * float64(time.Second)))
	for worker := range *clients {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			local := make([][]outcome, len(calls))
			for time.Now().Before(deadline) {
				index := wheel[rng.IntN(len(wheel))]
				c := calls[index]
				local[index] = append(local[index], do(client, c, c.Variants[rng.IntN(len(c.Variants))]))
			}
			mu.Lock()
			for i := range local {
				results[i] = append(results[i], local[i]...)
			}
			mu.Unlock()
		}(uint64(worker))
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()

	report := map[string]figures{}
	var all []outcome
	shown := 0
	for i, c := range calls {
		report[c.Name] = summarise(results[i], elapsed, *rawLatencies)
		all = append(all, results[i]...)
		for _, o := range results[i] {
			if o.failed && shown < 5 {
				fmt.Fprintf(os.Stderr, "# %s failure: %s\n", c.Name, o.detail)
				shown++
			}
		}
	}
	report["Aggregated"] = summarise(all, elapsed, false)
	if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
		fail(err)
	}
}

func do(client *http.Client, c call, v variant) outcome {
	request, err := http.NewRequest(v.Method, v.URL, bytes.NewReader(v.Body))
	if err != nil {
		return outcome{failed: true, detail: err.Error()}
	}
	for key, value := range v.Headers {
		request.Header.Set(key, value)
	}
	began := time.Now()
	response, err := client.Do(request)
	if err != nil {
		return outcome{latency: time.Since(began), failed: true, detail: err.Error()}
	}
	body, _ := io.ReadAll(response.Body)
	response.Body.Close()
	latency := time.Since(began)
	if response.StatusCode != c.Expect {
		text := string(body)
		if len(text) > 200 {
			text = text[:200]
		}
		return outcome{latency: latency, failed: true, detail: fmt.Sprintf("%d: %s", response.StatusCode, text)}
	}
	return outcome{latency: latency}
}

func summarise(outcomes []outcome, elapsed float64, raw bool) figures {
	latencies := make([]time.Duration, 0, len(outcomes))
	failures := 0
	for _, o := range outcomes {
		latencies = append(latencies, o.latency)
		if o.failed {
			failures++
		}
	}
	slices.Sort(latencies)
	percentile := func(q float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(q*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	result := figures{
		Count:    len(outcomes),
		Failures: failures,
		Seconds:  elapsed,
		RPS:      float64(len(outcomes)) / elapsed,
		P50ms:    percentile(0.50),
		P99ms:    percentile(0.99),
	}
	if raw {
		result.Latencies = make([]int64, len(latencies))
		for i, latency := range latencies {
			result.Latencies[i] = latency.Microseconds()
		}
	}
	return result
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(2)
}
