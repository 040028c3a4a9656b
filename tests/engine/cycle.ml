(* tests/engine/cycle.ml — a program in step with the sampler's period in
   its own CPU time: every PERIOD ns of its thread's CPU time it runs
   [first] for the first 40% of them and [rest] for the remainder. It
   measures and prints its own split. Where a profiler's samples count the
   periods of a fixed grid of the thread's CPU time, the grid and the
   program's cycles stay in step for the whole run, and a sample's weight
   depends on where it falls in its period.
   Usage: cycle.exe PERIOD_NS [CPU_SECONDS]  (default 2) *)

external cpu_ns : unit -> int = "ticks_cpu_ns" [@@noalloc]

let period = int_of_string Sys.argv.(1)
let seconds = if Array.length Sys.argv > 2 then float_of_string Sys.argv.(2) else 2.0
let spins = ref 0

(* Busy until the thread's CPU clock reaches [until]. *)
let[@inline never] first until =
  while cpu_ns () < until do incr spins done

let[@inline never] rest until =
  while cpu_ns () < until do incr spins done

let () =
  let c = ref (cpu_ns ()) in
  let stop = !c + int_of_float (seconds *. 1e9) in
  let cycles = ref 0 and a = ref 0 and b = ref 0 in
  while !c < stop do
    let t0 = cpu_ns () in
    first (!c + period * 4 / 10);
    let t1 = cpu_ns () in
    rest (!c + period);
    let t2 = cpu_ns () in
    a := !a + (t1 - t0);
    b := !b + (t2 - t1);
    (* The next cycle starts a period after this one did, not where this
       one ended: the cycles keep step with the CPU clock. *)
    c := !c + period;
    incr cycles
  done;
  Printf.printf "cycle: %d cycles of %d ns, first %.1f%% of the CPU time\n" !cycles period
    (100. *. float_of_int !a /. float_of_int (max 1 (!a + !b)))
