(* idle.ml — bench/idle_bench.py's program: the cost of interposed blocking
   calls and of short-lived threads, printed as "poll_ns=X read_ns=X
   open_ns=X vmsize0_kb=N vmsize100_kb=N"; with PAUSE, then sleeps PAUSE seconds (a
   program waiting). With "pool", computes for SECS seconds of CPU beside N
   threads that sleep 50 ms at a time, and prints "pool=N". With "domains",
   computes N times MS ms of CPU, each time in a new domain joined at once
   ("inline": on the main thread), and prints "domains=N".
   Usage: idle.exe CALLS [PAUSE] | idle.exe pool N SECS
        | idle.exe domains|inline N MS *)

external poll_ns : int -> float = "idle_poll_ns"
external read_ns : int -> float = "idle_read_ns"
external open_ns : int -> float = "idle_open_ns"
external vmsize_after : int -> int = "idle_threads_vmsize"
external pause : float -> unit = "idle_pause"
external pool_start : int -> int = "idle_pool_start"
external pool_stop : unit -> unit = "idle_pool_stop"

(* Hashes strings until the process's CPU time reaches secs seconds. *)
let compute secs =
  let h = Hashtbl.create 4096 and i = ref 0 in
  while Sys.time () < secs do
    for _ = 1 to 10_000 do
      incr i;
      Hashtbl.replace h (string_of_int (!i land 4095)) !i
    done
  done

let pool n secs =
  let started = pool_start n in
  compute secs;
  pool_stop ();
  Printf.printf "pool=%d\n%!" started

let domains spawn n ms =
  for _ = 1 to n do
    let work () = compute (Sys.time () +. (ms /. 1000.)) in
    if spawn then Domain.join (Domain.spawn work) else work ()
  done;
  Printf.printf "domains=%d\n%!" n

let () =
  match Sys.argv.(1) with
  | "pool" -> pool (int_of_string Sys.argv.(2)) (float_of_string Sys.argv.(3))
  | ("domains" | "inline") as m ->
    domains (m = "domains") (int_of_string Sys.argv.(2)) (float_of_string Sys.argv.(3))
  | _ ->
  let n = int_of_string Sys.argv.(1) in
  let v0 = vmsize_after 0 in
  let p = poll_ns n and r = read_ns n and o = open_ns (n / 4) in
  let v1 = vmsize_after 100 in
  Printf.printf "poll_ns=%.0f read_ns=%.0f open_ns=%.0f vmsize0_kb=%d vmsize100_kb=%d\n%!" p r o v0 v1;
  if Array.length Sys.argv > 2 then pause (float_of_string Sys.argv.(2))
