(* tests/engine/memo_fx.ml — a generator fiber (an effect handler's
   continuation) resumed in turn from DEEP and from SHALLOW levels of one
   recursion of the main stack, ~50 ms each, from the same call site. The
   fiber's own frames are the same at either depth; its parent link (the
   main stack's position at the resume) is not. The fiber spins in
   spin_deep or spin_shallow after each resume (a global the resumer sets),
   so a sample's leaf says which depth its parent is at. A walk that
   replayed the fiber's parent from the thread's last whole stack
   (agent/memo.h) would give a spin_shallow sample DEEP levels of the main
   recursion instead of SHALLOW.
   Usage: memo_fx.exe [SECONDS] [DEEP] [SHALLOW]  (1.0 s of CPU, 600, 200). *)

open Effect
open Effect.Deep

type _ Effect.t += Yield : unit Effect.t

let seconds = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let deep = if Array.length Sys.argv > 2 then int_of_string Sys.argv.(2) else 600
let shallow = if Array.length Sys.argv > 3 then int_of_string Sys.argv.(3) else 200
let at_deep = ref false

(* ~20 us of float arithmetic *)
let[@inline never] work m k =
  let i = ref 0 and acc = ref (float_of_int k) in
  while !i < 20_000 do
    acc := (!acc *. 1.0000001) +. float_of_int (m land !i);
    incr i
  done;
  int_of_float !acc land 1

let[@inline never] spin_deep k = 1 + work 31 k
let[@inline never] spin_shallow k = 1 + work 29 k

(* The generator: yields, then spins once resumed, for ever (it spins only
   under a resume_at). *)
let rec gen k =
  perform Yield;
  let r = if !at_deep then spin_deep k else spin_shallow k in
  gen (k + r)

let next : (unit, unit) continuation option ref = ref None

let start () =
  match_with gen 0
    { retc = (fun () -> ());
      exnc = raise;
      effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Yield -> Some (fun (k : (a, unit) continuation) -> next := Some k)
        | _ -> None) }

(* Not a tail call: each level stays on the stack under the resume. *)
let rec resume_at n =
  if n = 0 then (
    match !next with
    | Some k -> next := None; continue k ()
    | None -> ())
  else (resume_at (n - 1); ignore (Sys.opaque_identity n))

let () =
  start ();
  let t0 = Sys.time () in
  let turns = ref 0 in
  while Sys.time () -. t0 < seconds do
    for i = 1 to 200 do
      (* the same call site for both depths: only the depth differs *)
      let d = if i <= 100 then deep else shallow in
      at_deep := i <= 100;
      resume_at d
    done;
    incr turns
  done;
  Printf.printf "memo_fx: %d turns\n" !turns
