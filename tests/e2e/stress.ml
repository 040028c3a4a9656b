(* stress.ml — e2e program for the profiler's hazardous moments rather than
   for attribution: in the main domain and two spawned ones, many short-lived
   Effect.Deep fibers recurse a few hundred to a few thousand frames deep
   (each fiber stack starts tiny, so it is reallocated and its frame pointers
   rewritten several times), allocate (minor and major GCs, stop-the-world
   between domains), yield to a round-robin scheduler at every level, and
   raise exceptions through many frames. The result is deterministic; the
   checker runs it with and without the profiler at a high rate and compares
   the output, then looks at the profile.
   Usage: stress.exe [PERCENT]  (default 100 = ~2 s of CPU over 3 domains) *)

open Effect
open Effect.Deep

type _ Effect.t += Yield : unit Effect.t

exception Found of int

type status = Done of int | Paused of (unit, status) continuation

(* Non-tail recursion that allocates a little list per level, yields every
   [every] levels and sometimes raises from the bottom to an outer frame. *)
let[@inline never] rec dive depth every seed =
  if depth = 0 then begin
    let l = List.init 32 (fun i -> (seed * 31 + i) land 0xffff) in
    let s = List.fold_left ( + ) 0 l in
    if s land 3 = 0 then raise (Found s) else s
  end else begin
    let cell = [ seed; depth ] in
    if depth mod every = 0 then perform Yield;
    let r =
      if depth mod 97 = 0 then (try dive (depth - 1) every (seed + 1) with Found s -> s + 1)
      else dive (depth - 1) every (seed + 1)
    in
    (r + List.length cell) land 0xffffff
  end

let[@inline never] fiber_body depth every seed () =
  try dive depth every seed with Found s -> s

let start f =
  match_with f ()
    { retc = (fun r -> Done r);
      exnc = raise;
      effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Yield -> Some (fun (k : (a, status) continuation) -> Paused k)
        | _ -> None) }

(* Keeps [live] fibers going; a finished fiber is replaced by a new one
   until [count] fibers have run. *)
let[@inline never] scheduler id count live =
  let q = Queue.create () and started = ref 0 and sum = ref 0 in
  let spawn () =
    incr started;
    let n = !started + id * 7919 in
    Queue.push (start (fiber_body (200 + (n * 37) mod 2800) (1 + n mod 13) n)) q
  in
  for _ = 1 to live do spawn () done;
  while not (Queue.is_empty q) do
    match Queue.pop q with
    | Done r ->
        sum := (!sum * 31 + r) land 0xffffff;
        if !started < count then spawn ()
    | Paused k -> Queue.push (continue k ()) q
  done;
  !sum

let () =
  let percent = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 100 in
  let count = max 1 (2000 * percent / 100) in
  let ds = List.init 2 (fun i -> Domain.spawn (fun () -> scheduler (i + 1) count 5)) in
  let r0 = scheduler 0 count 5 in
  let rs = List.map Domain.join ds in
  Printf.printf "stress: count=%d results=%s\n" count (String.concat "," (List.map string_of_int (r0 :: rs)))
