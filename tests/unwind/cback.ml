(* tests/unwind/cback.ml — OCaml code over C bindings: a [@@noalloc]
   checksum, sorting through glibc's qsort with an OCaml comparison called
   back from C, a C fold driving an OCaml closure, a stub that
   allocates a string per call, and a [@@noalloc] hash in assembly without
   unwind information. With "fiber", every other ten rounds run inside an
   effect handler, as all code does under an Eio-style scheduler: the
   callbacks from C then run on a fiber whose parent the runtime hides for
   their duration. With "nest", OCaml and C call each other 70 deep (a C
   fold whose closure folds again), and the work is done at the bottom.
   Usage: cback.exe [SCALE] [fiber|nest] *)

external checksum : Bytes.t -> int = "cb_checksum" [@@noalloc]
external sort_keys : int array -> (int -> int -> int) -> int array = "cb_sort_keys"
external fold : int -> ('a -> int -> 'a) -> 'a -> 'a = "cb_fold"
external render : int -> string = "cb_render"
external asm_hash : Bytes.t -> int = "cb_asm_hash" [@@noalloc]

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 500.))
let fibers = Array.length Sys.argv > 2 && Sys.argv.(2) = "fiber"
let nested = Array.length Sys.argv > 2 && Sys.argv.(2) = "nest"

let weights = Array.init 4096 (fun i -> (i * 7919) mod 1000)

(* A weight mixed a few times: the comparison itself, not only the
   callback machinery around it, is a share of the run worth sampling. *)
let mix w =
  let x = ref w in
  for _ = 1 to 8 do
    x := ((!x * 1103) + 12345) land 0xfffff
  done;
  !x

let[@inline never] by_weight a b =
  let c = compare (mix weights.(a land 4095)) (mix weights.(b land 4095)) in
  if c <> 0 then c else compare a b

let[@inline never] step acc i = acc + String.length (render (acc lxor i)) + (i land 3)

let[@inline never] one_round r =
  let keys = Array.init 3000 (fun i -> (i * 31 + r) land 4095) in
  let sorted = sort_keys keys by_weight in
  let b = Bytes.make 20_000 (Char.chr (r land 255)) in
  let c = checksum b + asm_hash b in
  let f = fold 40_000 step r in
  sorted.(0) + c + f

type _ Effect.t += Tick : int -> unit Effect.t

let[@inline never] in_fiber r =
  Effect.Deep.match_with
    (fun () -> Effect.perform (Tick r); one_round r) ()
    { retc = Fun.id; exnc = raise;
      effc = (fun (type a) (e : a Effect.t) ->
        match e with
        | Tick _ -> Some (fun (k : (a, _) Effect.Deep.continuation) -> Effect.Deep.continue k ())
        | _ -> None) }

let[@inline never] bottom acc =
  let x = ref acc in
  for i = 1 to 2000 do x := !x + mix (i land 4095) done;
  !x

let[@inline never] rec nest d acc = if d = 0 then bottom acc else fold 1 (fun a _ -> nest (d - 1) a) acc

let () =
  if nested then begin
    let acc = ref 0 in
    for r = 1 to rounds * 20 do acc := !acc + nest 70 r done;
    Printf.printf "cback: %d\n" (!acc land 0xffff);
    exit 0
  end;
  let acc = ref 0 in
  for r = 1 to rounds do
    acc := !acc + (if fibers && (r / 10) land 1 = 1 then in_fiber r else one_round r)
  done;
  Printf.printf "cback: %d\n" (!acc land 0xffff)
