(* fxexn.ml — fibers that end with an exception, as the fibers of an
   Eio-style scheduler do when a task fails or is cancelled: each task runs
   in its own fiber (Effect.Deep.match_with), yields once, and then either
   returns, raises (Failed, from OCaml code: built without -g, an inlined
   raise that pops the fiber's handler and jumps to it), or is discontinued
   while suspended (Cancelled, raised at its perform). Either exception
   leaves the fiber through caml_runstack's handler for it, so a good part
   of the program runs in the few instructions between the raise and the
   parent stack: without frame pointers those samples were [broken] (1.5%
   of them); with OCaml 5.1's frame pointers a sample on match_with's tail
   jump to caml_runstack had a junk frame under it.

   Usage: fxexn.exe [SECONDS] (CPU seconds, 1.2). Prints how many tasks
   returned, failed and were cancelled. *)

open Effect
open Effect.Deep

type _ Effect.t += Yield : unit Effect.t

exception Failed of int
exception Cancelled

(* A little work, so that the scheduler's own code stays most of it. *)
let[@inline never] crunch n =
  let r = ref 0 in
  for i = 1 to n do
    r := !r + ((i * i) land 7)
  done;
  !r

let[@inline never] task i () =
  let a = crunch 16 in
  perform Yield;
  let b = crunch 16 in
  if i mod 3 = 0 then raise (Failed (a + b)) else a + b

type outcome = { mutable ok : int; mutable failed : int; mutable cancelled : int }

(* Starts every task of a batch in its own fiber; each suspends at its
   Yield and is resumed (or, one in five, cancelled) afterwards. *)
let[@inline never] run_batch out first n =
  let waiting = Queue.create () in
  let handler =
    {
      retc = (fun v -> out.ok <- out.ok + (if v >= 0 then 1 else 0));
      exnc =
        (function
        | Failed _ -> out.failed <- out.failed + 1
        | Cancelled -> out.cancelled <- out.cancelled + 1
        | e -> raise e);
      effc =
        (fun (type a) (e : a Effect.t) ->
          match e with
          | Yield ->
              Some
                (fun (k : (a, unit) continuation) ->
                  let j = Queue.length waiting in
                  Queue.push
                    (fun () -> if j mod 5 = 4 then discontinue k Cancelled else continue k ())
                    waiting)
          | _ -> None);
    }
  in
  for i = first to first + n - 1 do
    match_with (task i) () handler
  done;
  Queue.iter (fun resume -> resume ()) waiting

let () =
  let seconds = try float_of_string Sys.argv.(1) with _ -> 1.2 in
  let out = { ok = 0; failed = 0; cancelled = 0 } in
  let next = ref 0 in
  (* The clock is read once per 32 batches: getrusage is no small part of
     a batch. *)
  while Sys.time () < seconds do
    for _ = 1 to 32 do
      run_batch out !next 64;
      next := !next + 64
    done
  done;
  Printf.printf "returned %d, failed %d, cancelled %d\n" out.ok out.failed out.cancelled
