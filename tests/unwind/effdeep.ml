(* tests/unwind/effdeep.ml — effects as in Eio-style code: a generator
   (perform Yield inside a deep handler, continue), a cancellation path
   (discontinue), nested handlers, and work done inside the fibers.
   Usage: effdeep.exe [SCALE] *)

open Effect
open Effect.Deep

type _ Effect.t += Yield : int -> unit Effect.t
type _ Effect.t += Ask : int Effect.t

exception Cancel

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 30000.))

let[@inline never] rec work n acc = if n = 0 then acc else work (n - 1) ((acc * 31 + n) land 0xffffff)

let[@inline never] producer depth () =
  let rec go d = if d = 0 then for i = 1 to 40 do perform (Yield (work 200 i + perform Ask)) done
    else (go (d - 1); ignore (Sys.opaque_identity d)) in
  go depth

let[@inline never] consume f =
  let sum = ref 0 in
  match_with f ()
    { retc = (fun () -> !sum);
      exnc = (function Cancel -> -1 | e -> raise e);
      effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Yield v -> Some (fun (k : (a, _) continuation) ->
            sum := !sum + v;
            if v land 0xfff = 7 then discontinue k Cancel else continue k ())
        | _ -> None) }

let[@inline never] with_env f =
  try_with f ()
    { effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Ask -> Some (fun (k : (a, _) continuation) -> continue k (work 100 3))
        | _ -> None) }

let () =
  let acc = ref 0 in
  for r = 1 to rounds do
    acc := !acc + with_env (fun () -> consume (producer (r mod 20)))
  done;
  Printf.printf "effdeep: %d\n" (!acc land 0xffff)
