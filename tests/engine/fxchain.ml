(* tests/engine/fxchain.ml — every frame a stack switch: each level of the
   recursion installs a handler (Effect.Deep.try_with, a new fiber) and
   tail-calls into it, as the OCaml testsuite's effects/evenodd.ml does, so
   a 64-frame walk crosses ~60 stacks, each read with system calls while the
   thread runs C (allocating those fibers). Such walks cost more than the
   handler's budget earns; the budget must hold anyway.
   Usage: fxchain.exe [SECONDS] (1.0). Prints the main thread's CPU time
   since main began (CLOCK_THREAD_CPUTIME_ID). *)
open Effect
open Effect.Deep

type _ t += E : unit t

let rec even n =
  if n = 0 then true
  else
    try_with odd (n - 1)
      { effc = (fun (type a) (e : a t) -> match e with E -> Some (fun _ -> assert false) | _ -> None) }

and odd n = if n = 0 then false else even (n - 1)

external thread_cputime : unit -> float = "fid_thread_cputime"

let cpu0 = thread_cputime ()

let () =
  let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0 in
  let rounds = ref 0 and evens = ref 0 in
  while thread_cputime () -. cpu0 < seconds do
    if even (20_000 + (!rounds land 1)) then incr evens;
    incr rounds
  done;
  Printf.printf "fxchain: %d rounds, %d even, thread_cpu %.4f\n" !rounds !evens
    (thread_cputime () -. cpu0)
